// SPDX-License-Identifier: Apache-2.0
// pasa bench: times pasa's CUDA kernels through the public API (pasa::bench_cuda_attention: CUDA
// events, L2 flushed before each timed call, median of --runs after --warmup). Prefill points follow
// the kernel issue's grid: head dims 64 / 128 (96 and 256 on request), S = 1k / 4k / 16k with
// B * S = --tokens and H = --hidden / D (rounded down: 21 heads at 96), causal and not, fp16 and bf16; then decode (S_q = 1, 32
// query / 8 KV heads, d = 128, bf16, B = 64 at S_kv = 4k .. 32k). Progress on stderr, a table on
// stdout, one CSV row per point with --csv (the columns bench/torch_sdpa.py reads to put torch SDPA
// beside it); --decode-cache times decode on KV caches too. A point the kernels do not take (sage8 at
// head dim 96) or that does not fit in memory is skipped with its reason, and the run goes on; a CUDA
// error stops it.

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "gpu_errors.h"
#include "io/atomic_file.h"
#include "output_paths.h"
#include "pasa/bench.h"
#include "pasa/error.h"
#include "pasa/policy.h"
#include "policy_options.h"
#include "text/format.h"

namespace pasa::cli {
namespace {

struct BenchOptions {
  std::vector<std::string> policies{"exact", "pasa", "sage8"};
  std::vector<std::string> dtypes{"fp16", "bf16"};
  std::vector<int> head_dims{64, 128};
  std::vector<int> seqs{1024, 4096, 16384};
  std::vector<std::string> masks{"full", "causal"};
  std::vector<std::string> decode_policies{"exact", "fdpp"};
  std::vector<int> decode_seqs{4096, 8192, 16384, 32768};
  std::vector<std::string> decode_caches{"tensors"};
  int tokens = 32768, hidden = 2048, decode_batch = 64, runs = 30, warmup = 5;
  bool no_decode = false;
  std::string csv;
};

struct Row {
  std::string method, dtype;
  int D, H, S, B;
  bool causal;
  double ms, rate;   // rate: TFLOP/s (prefill) or TB/s of K and V read (decode)
  const char* unit;  // "TFLOP/s" or "TB/s"
};

// The head dims the kernels take, as --head-dim's messages say them.
const std::string kHeadDimsText = "the kernels take 64, 96, 128 or 256";

DType parse_dtype(const std::string& s) {
  if (s == "fp16" || s == "f16") return DType::f16;
  if (s == "bf16") return DType::bf16;
  throw UsageError("--dtype: '" + s + "' is not fp16 or bf16");
}

// --decode-cache: "tensors" (K and V through pasa::attention), "dense" (a dense KV cache) or
// "paged<N>" (a paged one of N-position blocks), as BenchPoint::kv_cache_block.
int parse_decode_cache(const std::string& s) {
  if (s == "tensors") return BenchPoint::kTensors;
  if (s == "dense") return 0;
  if (s.starts_with("paged")) {
    const std::string n = s.substr(5);
    if (!n.empty() && n.size() <= 6 && n.find_first_not_of("0123456789") == std::string::npos) {
      const int block = std::stoi(n);
      if (block > 0 && (block & (block - 1)) == 0) return block;
    }
  }
  throw UsageError("--decode-cache: '" + s + "' is not tensors, dense or paged<N> (N a power of two: paged16)");
}

bool parse_mask(const std::string& s) {
  if (s == "causal") return true;
  if (s == "full") return false;
  throw UsageError("--mask: '" + s + "' is not full or causal");
}

// What the options name, parsed: the policies and the decode caches (BenchPoint::kv_cache_block each).
struct ParsedOptions {
  std::vector<Policy> policies, decode_policies;
  std::vector<int> decode_caches;
};

// A LIST option's policies: its comma-separated items are presets, each followed by its key=value
// overrides ("pasa,beta=0.5,exact" is pasa with beta 0.5, then exact), as the policy text writes them.
std::vector<std::string> policy_texts(const char* option, const std::vector<std::string>& items) {
  std::vector<std::string> texts;
  for (const std::string& item : items) {
    if (item.find('=') == std::string::npos) {
      texts.push_back(item);
    } else if (texts.empty()) {
      throw UsageError(std::string(option) + ": '" + item + "' overrides a field, but follows no preset "
                       "(write the preset first: pasa," + item + ")");
    } else {
      texts.back() += "," + item;
    }
  }
  return texts;
}

// A list option's value given twice would time one point twice, in rows that look like two; `shown`
// prints a value (values equal by == may print differently: policies in other words).
template <class T, class Shown = std::identity>
void refuse_repeats(const char* option, const std::vector<T>& values, Shown shown = {}) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (!(values[i] == values[j])) continue;
      const std::string a = text::format("{}", shown(values[i])), b = text::format("{}", shown(values[j]));
      throw UsageError(text::format("{}: {} is given twice{}", option, a, a == b ? "" : " (the same as " + b + ")"));
    }
  }
}

// Every option checked before any GPU work, a usage error naming it; returns what it parsed.
ParsedOptions validate(const BenchOptions& o) {
  if (o.runs < 1) throw UsageError("--runs must be at least 1");
  if (o.warmup < 0) throw UsageError("--warmup must not be negative");
  if (o.tokens < 1) throw UsageError("--tokens must be at least 1");
  if (o.decode_batch < 1) throw UsageError("--decode-batch must be at least 1");
  for (const int d : o.head_dims) {
    if (d != 64 && d != 96 && d != 128 && d != 256) {
      throw UsageError("--head-dim: " + kHeadDimsText + ", not " + std::to_string(d));
    }
    if (o.hidden < d) {
      throw UsageError("--hidden " + std::to_string(o.hidden) + " is smaller than head dim " + std::to_string(d));
    }
  }
  for (const int s : o.seqs) {
    if (s < 1 || o.tokens % s != 0) {
      throw UsageError("--seq " + std::to_string(s) + ": must be positive and divide --tokens " +
                       std::to_string(o.tokens));
    }
  }
  for (const int s : o.decode_seqs) {
    if (s < 1) throw UsageError(text::format("--decode-seq: {} is not a positive length", s));
  }
  ParsedOptions parsed;
  for (const std::string& p : policy_texts("--policy", o.policies)) {
    parsed.policies.push_back(parse_policy_option("--policy", p));
  }
  for (const std::string& p : policy_texts("--decode-policy", o.decode_policies)) {
    parsed.decode_policies.push_back(parse_policy_option("--decode-policy", p));
  }
  for (const std::string& c : o.decode_caches) {
    const int block = parse_decode_cache(c);
    for (const int s : o.decode_seqs) {
      if (block > 0 && s % block != 0) {
        throw UsageError("--decode-cache " + c + ": the block size must divide every --decode-seq (" +
                         std::to_string(s) + ")");
      }
    }
    parsed.decode_caches.push_back(block);
  }
  for (const std::string& d : o.dtypes) parse_dtype(d);
  for (const std::string& m : o.masks) parse_mask(m);
  refuse_repeats("--dtype", o.dtypes);
  refuse_repeats("--head-dim", o.head_dims);
  refuse_repeats("--seq", o.seqs);
  refuse_repeats("--mask", o.masks);
  refuse_repeats("--decode-seq", o.decode_seqs);
  refuse_repeats("--decode-cache", o.decode_caches);
  // (policies by their meaning: "pasa" and "pasa_accurate" with pasa's fields are one)
  const auto policy_text = [](const Policy& p) { return to_string(p); };
  refuse_repeats("--policy", parsed.policies, policy_text);
  refuse_repeats("--decode-policy", parsed.decode_policies, policy_text);
  return parsed;
}

void write_csv(const std::string& path, const std::vector<Row>& rows) {
  std::string text = "method,dtype,D,H,S,B,causal,ms,tflops\n";
  for (const Row& r : rows) {
    text += text::format("{},{},{},{},{},{},{},{:.4f},{:.2f}\n", r.method, r.dtype, r.D, r.H, r.S, r.B,
                        r.causal ? 1 : 0, r.ms, r.rate);
  }
  io::detail::write_text_atomically(path, text);
}

void run(const BenchOptions& o) {
  const auto [policies, decode_policies, decode_caches] = validate(o);
  check_output_files({}, {{"--csv", o.csv}});
  const std::string device = on_gpu("pasa bench", [] { return bench_device_description(); });
  text::print(text::progress_stream(), "pasa bench on {}: median of {} calls after {} warm-up, L2 flushed before each\n", device,
             o.runs, o.warmup);
  const int n_prefill = static_cast<int>(o.policies.size() * o.dtypes.size() * o.head_dims.size() * o.seqs.size() *
                                         o.masks.size());
  const int n_decode =
      o.no_decode ? 0 : static_cast<int>(o.decode_policies.size() * o.decode_seqs.size() * o.decode_caches.size());
  std::vector<Row> rows;
  std::uint64_t seed = 1;
  int done = 0;
  auto progress = [&](const Row& r) {
    text::print(text::progress_stream(), "[{}/{}] {} {} D{} S{} B{} {}: {:.3f} ms, {:.1f} {}\n", ++done, n_prefill + n_decode, r.method,
               r.dtype, r.D, r.S, r.B, r.causal ? "causal" : "full", r.ms, r.rate, r.unit);
  };
  // Times one point; a point the kernels refuse (or that needs more memory than there is) is said and
  // skipped, a CUDA error (the device is then unusable) ends the run.
  std::vector<std::string> skipped;
  auto time_point = [&](const BenchPoint& pt, const std::string& label) -> std::optional<BenchTiming> {
    try {
      return bench_cuda_attention(pt, o.warmup, o.runs, seed += 3);
    } catch (const Error& e) {
      // The device is unusable after a CUDA error: a runtime failure (exit 1), not this point's.
      if (std::string_view(e.what()).starts_with("CUDA error")) throw ResourceError(e.what());
      skipped.push_back(label + ": " + e.what());
      text::print(text::progress_stream(), "[{}/{}] {} skipped: {}\n", ++done, n_prefill + n_decode, label, e.what());
      return std::nullopt;
    }
  };
  for (const int D : o.head_dims) {
    for (const int S : o.seqs) {
      for (const std::string& mask : o.masks) {
        for (const std::string& dt : o.dtypes) {
          for (std::size_t pi = 0; pi < policies.size(); ++pi) {
            BenchPoint pt;
            pt.policy = policies[pi];
            pt.dtype = parse_dtype(dt);
            pt.batch = o.tokens / S;
            pt.heads_q = pt.heads_kv = o.hidden / D;
            pt.seq_q = pt.seq_kv = S;
            pt.head_dim = D;
            pt.causal = parse_mask(mask);
            const std::optional<BenchTiming> timed =
                time_point(pt, text::format("pasa-{} {} D{} S{} {}", o.policies[pi], dt, D, S, mask));
            if (!timed) continue;
            const BenchTiming& t = *timed;
            const double flops = 4.0 * pt.batch * pt.heads_q * double(S) * S * D * (pt.causal ? 0.5 : 1.0);
            rows.push_back({"pasa-" + o.policies[pi], dt, D, pt.heads_q, S, pt.batch, pt.causal, t.median_ms,
                            flops / (t.median_ms * 1e-3) / 1e12, "TFLOP/s"});
            progress(rows.back());
          }
        }
      }
    }
  }
  if (!o.no_decode) {
    for (const int S : o.decode_seqs) {
      for (std::size_t ci = 0; ci < decode_caches.size(); ++ci) {
        for (std::size_t pi = 0; pi < decode_policies.size(); ++pi) {
          BenchPoint pt;
          pt.policy = decode_policies[pi];
          pt.dtype = DType::bf16;
          pt.batch = o.decode_batch;
          pt.heads_q = 32;
          pt.heads_kv = 8;
          pt.seq_q = 1;
          pt.seq_kv = S;
          pt.head_dim = 128;
          pt.kv_cache_block = decode_caches[ci];
          const std::string method = "decode:" + o.decode_policies[pi] +
                                     (pt.kv_cache_block == BenchPoint::kTensors ? "" : ":" + o.decode_caches[ci]);
          const std::optional<BenchTiming> timed = time_point(pt, text::format("{} S_kv {}", method, S));
          if (!timed) continue;
          const BenchTiming& t = *timed;
          const double bytes = 2.0 * pt.batch * pt.heads_kv * double(S) * pt.head_dim * 2;
          rows.push_back({method, "bf16", pt.head_dim, pt.heads_q, S, pt.batch, false, t.median_ms,
                          bytes / (t.median_ms * 1e-3) / 1e12, "TB/s"});
          progress(rows.back());
        }
      }
    }
  }

  text::print("pasa bench: {}; median of {} calls\n", device, o.runs);
  text::print("{:<24} {:<5} {:>4} {:>6} {:>4} {:<6} {:>10} {:>9}\n", "method", "dtype", "D", "S", "B", "mask", "ms", "rate");
  for (const Row& r : rows) {
    const bool decode = std::string(r.unit) == "TB/s";
    text::print("{:<24} {:<5} {:>4} {:>6} {:>4} {:<6} {:>10.4f} {:>9.1f} {}\n", r.method, r.dtype, r.D, r.S, r.B,
               decode ? "-" : (r.causal ? "causal" : "full"), r.ms, r.rate, r.unit);
  }
  if (!skipped.empty()) {
    text::print("skipped {} point(s):\n", skipped.size());
    for (const std::string& s : skipped) text::print("  {}\n", s);
  }
  if (rows.empty()) throw Error("pasa bench: no point could be timed (each one's reason is above)");
  if (!o.csv.empty()) {
    write_checked_outputs([&] { write_csv(o.csv, rows); });
    text::print(text::progress_stream(), "wrote {} rows to {}\n", rows.size(), o.csv);
  }
}

}  // namespace

void add_bench_command(Command& app) {
  auto opt = std::make_shared<BenchOptions>();
  Command* cmd = app.add_subcommand(
      "bench", "Time pasa's CUDA kernels (needs an sm_80+ GPU; sage8 an sm_90 one): prefill TFLOP/s "
      "and decode KV-read TB/s");
  cmd->add_option("--policy", opt->policies,
                  "prefill policies, comma-separated, each preset followed by its key=value overrides "
                  "(pasa,beta=0.5,exact)")->delimiter(',')->capture_default_str();
  cmd->add_option("--dtype", opt->dtypes, "input dtypes: fp16, bf16")->delimiter(',')->capture_default_str();
  cmd->add_option("--head-dim", opt->head_dims, "head dims (64, 96, 128, 256)")
      ->delimiter(',')
      ->capture_default_str()
      ->range(kHeadDimsText);
  cmd->add_option("--seq", opt->seqs, "sequence lengths (S_q = S_kv), each dividing --tokens (B = tokens / S)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--mask", opt->masks, "full, causal")->delimiter(',')->capture_default_str();
  cmd->add_option("--tokens", opt->tokens, "B * S of every prefill point")->capture_default_str();
  cmd->add_option("--hidden", opt->hidden, "H * D of every prefill point (H rounded down)")->capture_default_str();
  const Option* no_decode = cmd->add_flag("--no-decode", opt->no_decode, "prefill points only");
  cmd->add_option("--decode-policy", opt->decode_policies, "decode policies, as --policy (fdpp,phi=-2,exact)")
      ->delimiter(',')
      ->capture_default_str()
      ->excludes(no_decode);
  cmd->add_option("--decode-seq", opt->decode_seqs, "decode KV lengths")
      ->delimiter(',')
      ->capture_default_str()
      ->excludes(no_decode);
  cmd->add_option("--decode-batch", opt->decode_batch, "decode batch")->capture_default_str()->excludes(no_decode);
  cmd->add_option("--decode-cache", opt->decode_caches,
                  "where decode reads K and V: tensors (pasa::attention), dense or paged<N> (a full KV cache "
                  "through attention_with_kvcache's plan; paged: N-position blocks, N a power of two, shuffled)")
      ->delimiter(',')
      ->capture_default_str()
      ->excludes(no_decode);
  cmd->add_option("--runs", opt->runs, "timed calls per point (the median is reported)")->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "untimed calls before them")->capture_default_str();
  cmd->add_option("--csv", opt->csv, "write one row per point here");
  cmd->callback([opt] { run(*opt); });
}

}  // namespace pasa::cli
