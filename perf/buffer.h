// Page-aligned, touched bytes for sluice-perf's buffers, on both sides of every comparison.
// Where a buffer starts within its page changes what a copy between two of them costs (source
// and destination a few bytes apart modulo 4 KiB alias in the store buffer; the kernel's copy
// was seen ~5x slower), so Sluice's runs and the raw UCX baseline use equally placed buffers.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstring>
#include <new>
#include <span>
#include <utility>

namespace sluice::perf {

class PageBuffer {
 public:
  PageBuffer() = default;
  // `offset` bytes into its first page (0: page-aligned).
  explicit PageBuffer(std::size_t n, std::size_t offset = 0) : size_(n), offset_(offset) {
    if (n == 0) return;
    void* p = ::mmap(nullptr, n + offset, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<std::byte*>(p) + offset;
    std::memset(data_, 0, n);  // touched: no page fault inside a timed loop
  }
  PageBuffer(PageBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        offset_(std::exchange(o.offset_, 0)) {}
  PageBuffer& operator=(PageBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(offset_, o.offset_);
    return *this;
  }
  ~PageBuffer() {
    if (data_ != nullptr) ::munmap(data_ - offset_, size_ + offset_);
  }

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<std::byte> span() const { return {data_, size_}; }
  std::span<std::byte> first(std::size_t n) const { return {data_, n}; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t offset_ = 0;
};

}  // namespace sluice::perf
