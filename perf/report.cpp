#include "report.h"

#include <algorithm>
#include <cstdio>

#include <sluice/config.h>

#include "tests.h"

namespace sluice::perf {
namespace {
double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }
std::string fmt(double v, int prec = 3) {
  if (std::isnan(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", prec, v);
  return buf;
}

// Ratios keep 4 significant digits whatever their size (fanin's is far below 1).
std::string fmt_ratio(double v) {
  if (std::isnan(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

// crowd's columns, each after `sep`, empty (CSV) or null (JSON) in other tests' rows; JSON's
// each `"name": ` when `quote` is a quote mark.
std::string crowd_columns(const Row& r, const char* sep, const char* quote) {
  const CrowdFigures& c = r.crowd;
  bool json = *quote != '\0';
  std::string none = json ? "null" : "";
  auto num = [&](double v, int prec) { return std::isnan(v) ? none : fmt(v, prec); };
  auto count = [&](int n) { return n > 0 ? std::to_string(n) : none; };
  const std::pair<const char*, std::string> columns[] = {
      {"peers", count(c.peers)},          {"busy", count(c.busy)},
      {"fairness", num(c.fairness, 4)},   {"recv_hwm_ratio", num(c.recv_hwm, 4)},
      {"connect_s", num(c.connect_s, 3)}, {"server_idle_cpu_pct", num(c.server_cpu, 3)},
  };
  std::string out;
  for (const auto& [name, value] : columns) out += sep + (json ? std::string(quote) + name + quote + ": " : "") + value;
  return out;
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  auto i = static_cast<std::size_t>(
      std::min<double>(static_cast<double>(v.size() - 1), std::floor(p * static_cast<double>(v.size()))));
  return v[i];
}

Figures median_of(const std::vector<Figures>& runs) {
  auto pick = [&](double Figures::*f) {
    std::vector<double> v;
    for (const auto& r : runs)
      if (!std::isnan(r.*f)) v.push_back(r.*f);
    return v.empty() ? NAN : median(v);
  };
  return {pick(&Figures::lat_p50_us),   pick(&Figures::lat_p99_us),  pick(&Figures::lat_avg_us),
          pick(&Figures::bw_mbps),      pick(&Figures::rate),        pick(&Figures::extra),
          pick(&Figures::recv_hwm),     pick(&Figures::recv_budget), pick(&Figures::waiting),
          pick(&Figures::waiting_bytes)};
}

Figures from_rtts(const std::vector<double>& seconds, double scale, std::size_t size) {
  Figures f;
  std::vector<double> us;
  double sum = 0;
  for (double s : seconds) {
    us.push_back(s * 1e6 * scale);
    sum += s * 1e6 * scale;
  }
  f.lat_p50_us = percentile(us, 0.5);
  f.lat_p99_us = percentile(us, 0.99);
  f.lat_avg_us = us.empty() ? NAN : sum / static_cast<double>(us.size());
  if (f.lat_avg_us > 0) {
    f.rate = 1e6 / (f.lat_avg_us / scale);
    f.bw_mbps = static_cast<double>(size) / f.lat_avg_us;
  }
  return f;
}

// Enough iterations for a stable median, scaled down for large messages so that every row
// takes about the same time (the test's bytes per repetition).
int default_iters(const Test& t, std::size_t size) {
  std::size_t by_size = t.bytes_per_rep / std::max<std::size_t>(size, 1);
  return static_cast<int>(std::clamp<std::size_t>(by_size, 100, static_cast<std::size_t>(t.iters)));
}

double headline_ratio(const Test& t, const Row& r) {
  const Figures& a = r.sluice;
  const Figures& b = r.base;
  if (t.mode == Mode::kLoadedLatency) return a.lat_p99_us / b.lat_p99_us;
  if (t.mode == Mode::kMemory) return a.recv_hwm / a.recv_budget;
  if (r.baseline == "none") return NAN;
  if (t.mode == Mode::kLatency) return a.lat_p50_us / b.lat_p50_us;
  if (t.mode == Mode::kRate || r.size <= 4096) return a.rate / b.rate;
  return a.bw_mbps / b.bw_mbps;
}

std::string fanin_note(const Row& r, const Options&) {
  auto size = [](double bytes) { return sluice::format_size(static_cast<std::size_t>(bytes)); };
  auto msgs = [&](const Figures& f) {
    return std::to_string(static_cast<long>(f.waiting)) + " messages (" + size(f.waiting_bytes) + ")";
  };
  std::string note = "receive memory peaked at " + size(r.sluice.recv_hwm) + " of its " + size(r.sluice.recv_budget) +
                     " budget; " + msgs(r.sluice) + " were waiting when rank 0 caught up";
  if (!std::isnan(r.base.waiting)) note += " (raw UCX, no flow control: " + msgs(r.base) + ")";
  return note;
}

std::string submit_note(const Row&, const Options& o) {
  return std::to_string(o.producers) + (o.producers == 1 ? " producer thread" : " producer threads") +
         " through submit(); baseline: the engine thread sending alone";
}

std::string crowd_note(const Row& r, const Options& o) {
  const CrowdFigures& c = r.crowd;
  char note[512];
  std::snprintf(
      note, sizeof(note),
      "%d busy among %d idle: %s of solo (%s before, %s after), fairness %s; recv pool high-water %s of budget; "
      "%d connects%s in %s s (slowest %s s, %d failed); idle server %s%% of a core, idle clients %s%%; %d of %d "
      "idle still alive; %d failed calls",
      c.busy, c.peers, fmt_ratio(r.ratio).c_str(), fmt(c.solo_before, 0).c_str(), fmt(c.solo_after, 0).c_str(),
      fmt(c.fairness).c_str(), fmt_ratio(c.recv_hwm).c_str(), c.peers, o.connects == "all" ? " at once" : "",
      fmt(c.connect_s, 2).c_str(), fmt(c.connect_max_s).c_str(), c.failed_connects, fmt(c.server_cpu, 2).c_str(),
      fmt(c.idle_clients_cpu, 1).c_str(), c.alive, c.peers, c.errors);
  std::string s = note;
  if (o.idle_calls > 0)
    s += "; idle clients' calls " + std::to_string(c.idle_calls) + ", " + std::to_string(c.idle_calls_failed) +
         " failed";
  return s;
}

std::string mixed_note(const Row& r, const Options&) {
  return "small-RPC p99 " + fmt(r.sluice.lat_p99_us) + " us while 2 MiB streams run, " + fmt(r.base.lat_p99_us) +
         " us without";
}

void print_header(const Options& o, const std::string& sides) {
  if (o.format == "csv") {
    std::printf(
        "test,size,iters,window,lat_p50_us,lat_p99_us,lat_avg_us,bw_MBps,rate_per_s,baseline,"
        "baseline_lat_p50_us,baseline_bw_MBps,baseline_rate_per_s,ratio,mode,peers,busy,fairness,recv_hwm_ratio,"
        "connect_s,server_idle_cpu_pct\n");
  } else if (o.format == "table") {
    std::printf("# ratio = Sluice / baseline of each test's headline figure:\n");
    print_ratios(stdout, "# ");
    std::printf("# mode: %s (%s)\n", o.mode.c_str(), sides.c_str());
    std::printf("%-9s %9s %7s %4s | %9s %9s %9s %10s %11s | %-8s %9s %10s %11s | %7s %s\n", "test", "size", "iters",
                "win", "p50 us", "p99 us", "avg us", "MB/s", "rate/s", "baseline", "p50 us", "MB/s", "rate/s", "ratio",
                "mode");
  }
  std::fflush(stdout);
}

void print_row(const Row& r, const Options& o) {
  if (o.format == "csv") {
    std::printf("%s,%zu,%d,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s%s\n", r.test.c_str(), r.size, r.iters, r.window,
                fmt(r.sluice.lat_p50_us).c_str(), fmt(r.sluice.lat_p99_us).c_str(), fmt(r.sluice.lat_avg_us).c_str(),
                fmt(r.sluice.bw_mbps, 1).c_str(), fmt(r.sluice.rate, 0).c_str(), r.baseline.c_str(),
                fmt(r.base.lat_p50_us).c_str(), fmt(r.base.bw_mbps, 1).c_str(), fmt(r.base.rate, 0).c_str(),
                fmt_ratio(r.ratio).c_str(), r.mode.c_str(), crowd_columns(r, ",", "").c_str());
  } else if (o.format == "table") {
    std::printf("%-9s %9s %7d %4d | %9s %9s %9s %10s %11s | %-8s %9s %10s %11s | %7s %s%s\n", r.test.c_str(),
                sluice::format_size(r.size).c_str(), r.iters, r.window, fmt(r.sluice.lat_p50_us).c_str(),
                fmt(r.sluice.lat_p99_us).c_str(), fmt(r.sluice.lat_avg_us).c_str(), fmt(r.sluice.bw_mbps, 1).c_str(),
                fmt(r.sluice.rate, 0).c_str(), r.baseline.c_str(), fmt(r.base.lat_p50_us).c_str(),
                fmt(r.base.bw_mbps, 1).c_str(), fmt(r.base.rate, 0).c_str(), fmt_ratio(r.ratio).c_str(), r.mode.c_str(),
                r.note.empty() ? "" : ("  " + r.note).c_str());
  }
  std::fflush(stdout);
}

void print_json(const std::vector<Row>& rows, const Options& o) {
  if (o.format != "json") return;
  std::printf("[\n");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    auto num = [](double v) { return std::isnan(v) ? std::string("null") : fmt(v); };
    std::printf(
        "  {\"test\": \"%s\", \"size\": %zu, \"iters\": %d, \"window\": %d, \"lat_p50_us\": %s, "
        "\"lat_p99_us\": %s, \"lat_avg_us\": %s, \"bw_MBps\": %s, \"rate_per_s\": %s, "
        "\"baseline\": \"%s\", \"baseline_lat_p50_us\": %s, \"baseline_bw_MBps\": %s, "
        "\"baseline_rate_per_s\": %s, \"ratio\": %s, \"mode\": \"%s\"%s}%s\n",
        r.test.c_str(), r.size, r.iters, r.window, num(r.sluice.lat_p50_us).c_str(), num(r.sluice.lat_p99_us).c_str(),
        num(r.sluice.lat_avg_us).c_str(), num(r.sluice.bw_mbps).c_str(), num(r.sluice.rate).c_str(), r.baseline.c_str(),
        num(r.base.lat_p50_us).c_str(), num(r.base.bw_mbps).c_str(), num(r.base.rate).c_str(),
        (std::isnan(r.ratio) ? std::string("null") : fmt_ratio(r.ratio)).c_str(), r.mode.c_str(),
        crowd_columns(r, ", ", "\"").c_str(), i + 1 < rows.size() ? "," : "");
  }
  std::printf("]\n");
}

}  // namespace sluice::perf
