#include "mem/arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include <absl/strings/str_format.h>

#include "core/log.h"

namespace sluice::detail {

absl::StatusOr<std::unique_ptr<Arena>> Arena::create(std::size_t length, HugePages huge, int node, const Topology* topo,
                                                     const TransportContext* ucx) {
  std::unique_ptr<Arena> a(new Arena());
  void* p = MAP_FAILED;
  if (huge != HugePages::kNo) {
    std::size_t len = (length + kHugePage - 1) / kHugePage * kHugePage;
    p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
      a->length_ = len;
      a->huge_ = true;
    } else if (huge == HugePages::kYes) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("SLUICE_HUGEPAGES=yes: cannot map %s of 2M huge pages (%s); reserve some with "
                          "sysctl vm.nr_hugepages or set SLUICE_HUGEPAGES=try",
                          format_size(len), std::strerror(errno)));
    } else {
      static std::once_flag once;
      std::call_once(once, [] { SLUICE_LOG(kInfo, "mem", "no 2M huge pages available, pools use 4K pages"); });
    }
  }
  if (p == MAP_FAILED) {
    std::size_t len = (length + kSmallPage - 1) / kSmallPage * kSmallPage;
    p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot map %s for a pool arena: %s", format_size(len), std::strerror(errno)));
    }
    a->length_ = len;
  }
  a->data_ = static_cast<std::byte*>(p);
  // Place before touching: the first touch allocates the pages, on the bound node.
  if (node >= 0 && topo != nullptr) {
    SLUICE_RETURN_IF_ERROR(topo->bind_memory(a->data_, a->length_, node));
  }
  // Every page allocated now, in one call (Linux 5.14+), rather than a fault per page touched:
  // a 2 MiB chunk of 4K pages is 512 faults, which a virtual machine makes dear.
  if (madvise(a->data_, a->length_, MADV_POPULATE_WRITE) != 0) {
    std::size_t page = a->huge_ ? kHugePage : kSmallPage;
    for (std::size_t off = 0; off < a->length_; off += page) a->data_[off] = std::byte{0};
  }
  if (ucx != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(a->memory_, MemoryRegistration::map(*ucx, a->data_, a->length_));
  }
  return a;
}

Arena::~Arena() {
  memory_ = MemoryRegistration();  // unregister before unmapping
  if (data_ != nullptr) munmap(data_, length_);
}

}  // namespace sluice::detail
