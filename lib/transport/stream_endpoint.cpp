// The Endpoint and Worker calls that lead to the stream transport (transport.h), for both
// implementations of the seam.
#include <unistd.h>

#include "transport/stream.h"

namespace sluice::detail {

Worker::Worker() = default;

Endpoint Worker::stream_endpoint(StreamOptions options, Endpoint::ErrorCallback on_error, void* arg) {
  if (!streams_) streams_ = std::make_unique<StreamHub>();
  Endpoint out;
  out.stream_ = streams_->open(std::move(options), on_error, arg);
  out.hub_ = streams_.get();
  out.worker_ = worker_;
  return out;
}

int Worker::stream_fd() const { return streams_ ? streams_->fd() : -1; }

bool Worker::stream_progress() { return streams_->progress(); }

void Worker::streams_woke(bool ready) {
  if (streams_) streams_->woke(ready);
}

void Worker::hold_streams() { streams_->hold(); }

void Worker::release_streams() { streams_->release(); }

void Endpoint::attach(int fd) {
  if (stream_ != nullptr) stream_->attach(fd);
  else if (fd >= 0) ::close(fd);
}

std::string Endpoint::failure() const { return stream_ != nullptr ? stream_->failure() : std::string(); }

bool Endpoint::closed_by_peer() const { return stream_ != nullptr && stream_->closed_by_peer(); }

void Endpoint::close_stream() {
  hub_->close(stream_);
  stream_ = nullptr;
}

}  // namespace sluice::detail
