// The PeerTable component (lib/am/peer_table.h) beside a rogue rank over the fake transport:
// rank records made at init and lookups bounded by the job, an endpoint UCX declares failed
// (recorded in its callback, the peer failed on the next progress), and client/server indices:
// a gone client's index serves the next client with the next epoch while its old Peer answers
// as dead, and an index something may still call back for is not reused.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "am/engine_access.h"
#include "unit/am/rogue.h"

namespace sluice::detail {
namespace {

using rogue::ProtocolTest;
using ::testing::HasSubstr;

// A UCX error status for the endpoint callback (UCS_ERR_ENDPOINT_TIMEOUT).
constexpr int kEndpointTimeout = -80;

class PeerTableTest : public ProtocolTest {
 protected:
  PeerTable& table() { return EngineAccess::core(*engine_).peers(); }
};

TEST_F(PeerTableTest, RanksAreMadeAtInitAndLookupsStayWithinTheJob) {
  PeerTable& t = table();
  ASSERT_EQ(t.ranks(), 2);
  EXPECT_EQ(t.size(), 2u) << "no client/server record yet";
  for (int r = 0; r < 2; ++r) {
    PeerData* p = t.by_rank(r);
    ASSERT_NE(p, nullptr) << "rank " << r;
    EXPECT_EQ(p->rank(), r);
    EXPECT_EQ(p->id(), static_cast<std::uint32_t>(r)) << "a rank's index is its rank";
    EXPECT_EQ(p->name(), "rank " + std::to_string(r));
    EXPECT_EQ(p->remote_index(), 0u) << "our rank is 0: the slot rank " << r << " knows us by";
    EXPECT_EQ(t.handle(r), engine_->peer(r)) << "Engine::peer() answers from the table";
    EXPECT_EQ(p->handle(), engine_->peer(r));
    EXPECT_EQ(t.by_index(static_cast<std::uint32_t>(r)), p);
  }
  EXPECT_EQ(t.by_rank(-1), nullptr);
  EXPECT_EQ(t.by_rank(2), nullptr);
  EXPECT_EQ(t.by_index(2), nullptr) << "a tag's slot beyond the table names no peer";
  EXPECT_EQ(t.handle(2), nullptr);
  EXPECT_EQ(t.handle(-1), nullptr);
}

TEST_F(PeerTableTest, AnEndpointUcxDeclaresFailedFailsItsPeerOnTheNextProgress) {
  ready(8);
  PeerData& p = *table().by_rank(1);
  ASSERT_EQ(p.state(), PeerState::kReady);
  // Inside UCX's callback nothing changes but the record of it: the peer fails after.
  PeerTable::on_ep_error(&p, kEndpointTimeout);
  EXPECT_TRUE(table().endpoints_failed());
  EXPECT_EQ(p.state(), PeerState::kReady) << "no peer state changes inside the transport's callback";
  // Handled after a progress call returns: with its completions, or on the next clock check.
  ASSERT_TRUE(pump([&] { return p.state() == PeerState::kDead; }));
  EXPECT_FALSE(table().endpoints_failed());
  EXPECT_THAT(p.link.fail_reason(), HasSubstr("transport error"));
  EXPECT_FALSE(engine_->peer(1)->alive());
  EXPECT_EQ(stat("peers.failed"), 1u);
}

TEST_F(PeerTableTest, AGoneClientsIndexServesTheNextClientWithTheNextEpoch) {
  PeerTable& t = table();
  PeerData& first = t.add_client();
  const std::uint32_t index = first.id();
  EXPECT_EQ(index, 2u) << "client/server records follow the ranks";
  EXPECT_EQ(first.rank(), -1);
  EXPECT_EQ(first.state(), PeerState::kNew);
  Peer* old_handle = first.handle();
  ASSERT_NE(old_handle, nullptr);
  EXPECT_TRUE(old_handle->alive());

  t.abandon(first, "its admission failed");
  EXPECT_EQ(first.state(), PeerState::kDead);
  EXPECT_EQ(first.link.fail_reason(), "its admission failed");
  EXPECT_FALSE(old_handle->alive());

  PeerData& second = t.add_client();
  EXPECT_EQ(second.id(), index) << "the gone client's index serves the next one";
  EXPECT_EQ(&second, &first) << "in the same record";
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(second.epoch(), 1u) << "what of the old client still completes is stale";
  EXPECT_EQ(second.state(), PeerState::kNew);
  EXPECT_EQ(second.name(), "client index 2");
  EXPECT_NE(second.handle(), old_handle) << "the new client gets a Peer of its own";
  EXPECT_TRUE(second.handle()->alive());
  EXPECT_FALSE(old_handle->alive()) << "the old client's Peer stays dead: it cannot reach the new one";
  EXPECT_EQ(old_handle->send_copy(5, {}, {}), Result::kUnavailable);
  EXPECT_EQ(stat("peers.reused"), 1u);
}

TEST_F(PeerTableTest, AnIndexTheTransportMayStillCallBackForIsNotReused) {
  PeerTable& t = table();
  PeerData& gone = t.add_client();
  t.abandon(gone, "its connect failed");
  // An endpoint callback for it is still to be handled: its index must not serve another
  // client before that (the callback names the index).
  PeerTable::on_ep_error(&gone, kEndpointTimeout);
  PeerData& next = t.add_client();
  EXPECT_NE(next.id(), gone.id()) << "a new index instead";
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(stat("peers.reused"), 0u);
  // Once it is handled, the index is free again.
  ASSERT_TRUE(pump([&] { return !t.endpoints_failed(); }));
  t.abandon(next, "its connect failed too");
  PeerData& third = t.add_client();
  EXPECT_EQ(third.id(), gone.id()) << "the oldest gone index first";
  EXPECT_EQ(stat("peers.reused"), 1u);
}

}  // namespace
}  // namespace sluice::detail
