#include "boot/pmix.h"

#include <cstdlib>
#include <cstring>

#include <absl/strings/str_format.h>

#include "core/config_table.h"
#include "sluice_build_config.h"

#if SLUICE_HAVE_PMIX
#include <pmix.h>
#endif

namespace sluice::detail {

bool pmix_available_from_environment() {
  // The launcher's own variables, not SLUICE_*: read through the one config lookup.
  return config_lookup("PMIX_RANK").has_value() && config_lookup("PMIX_NAMESPACE").has_value();
}

#if SLUICE_HAVE_PMIX
namespace {

class PmixBootstrap final : public Bootstrap {
 public:
  ~PmixBootstrap() override {
    if (initialized_) PMIx_Finalize(nullptr, 0);
  }
  absl::Status init() {
    pmix_status_t rc = PMIx_Init(&me_, nullptr, 0);
    if (rc != PMIX_SUCCESS) return absl::UnavailableError(absl::StrFormat("PMIx_Init: %s", PMIx_Error_string(rc)));
    initialized_ = true;
    pmix_proc_t job;
    PMIX_PROC_LOAD(&job, me_.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t* val = nullptr;
    rc = PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &val);
    if (rc != PMIX_SUCCESS || val == nullptr)
      return absl::UnavailableError(absl::StrFormat("PMIx_Get(job size): %s", PMIx_Error_string(rc)));
    size_ = static_cast<int>(val->data.uint32);
    PMIX_VALUE_RELEASE(val);
    // The job's ranks on this node; a server that does not say leaves it unknown (0).
    val = nullptr;
    if (PMIx_Get(&job, PMIX_LOCAL_SIZE, nullptr, 0, &val) == PMIX_SUCCESS && val != nullptr) {
      if (val->type == PMIX_UINT32) local_size_ = static_cast<int>(val->data.uint32);
      PMIX_VALUE_RELEASE(val);
    }
    return absl::OkStatus();
  }
  int rank() const override { return static_cast<int>(me_.rank); }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "pmix"; }

  absl::Status put(std::string_view key, std::string_view value) override {
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = const_cast<char*>(value.data());
    v.data.bo.size = value.size();
    std::string k(key);
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, k.c_str(), &v);
    if (rc != PMIX_SUCCESS)
      return absl::UnavailableError(absl::StrFormat("PMIx_Put(%s): %s", k, PMIx_Error_string(rc)));
    return absl::OkStatus();
  }

  absl::Status fence() override {
    pmix_status_t rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) return absl::UnavailableError(absl::StrFormat("PMIx_Commit: %s", PMIx_Error_string(rc)));
    pmix_info_t info;
    bool collect = true;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    pmix_proc_t all;
    PMIX_PROC_LOAD(&all, me_.nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Fence(&all, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) return absl::UnavailableError(absl::StrFormat("PMIx_Fence: %s", PMIx_Error_string(rc)));
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> get(int rank, std::string_view key) override {
    if (rank < 0 || rank >= size_)
      return absl::InvalidArgumentError(absl::StrFormat("rank %d is not in [0, %d)", rank, size_));
    pmix_proc_t p;
    PMIX_PROC_LOAD(&p, me_.nspace, static_cast<pmix_rank_t>(rank));
    pmix_value_t* val = nullptr;
    std::string k(key);
    pmix_status_t rc = PMIx_Get(&p, k.c_str(), nullptr, 0, &val);
    if (rc == PMIX_ERR_NOT_FOUND) return absl::NotFoundError(absl::StrFormat("rank %d published no '%s'", rank, k));
    if (rc != PMIX_SUCCESS || val == nullptr)
      return absl::UnavailableError(absl::StrFormat("PMIx_Get(%d, %s): %s", rank, k, PMIx_Error_string(rc)));
    std::string out;
    if (val->type == PMIX_BYTE_OBJECT) out.assign(val->data.bo.bytes, val->data.bo.size);
    PMIX_VALUE_RELEASE(val);
    return out;
  }

 private:
  pmix_proc_t me_{};
  int size_ = 0;
  int local_size_ = 0;
  bool initialized_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Bootstrap>> make_pmix_bootstrap(const Config&) {
  auto b = std::make_unique<PmixBootstrap>();
  SLUICE_RETURN_IF_ERROR(b->init());
  return std::unique_ptr<Bootstrap>(std::move(b));
}
#else
absl::StatusOr<std::unique_ptr<Bootstrap>> make_pmix_bootstrap(const Config&) {
  return absl::UnimplementedError("SLUICE_BOOT=pmix: this Sluice was built without PMIx (meson -Dpmix=enabled)");
}
#endif

}  // namespace sluice::detail
