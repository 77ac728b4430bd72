// SPDX-License-Identifier: Apache-2.0
// pasa run: attention on tensors from files, optionally checked against the fp64 reference.

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

#include "attention_checks.h"
#include "commands.h"
#include "pasa/attention.h"
#include "pasa/error.h"
#include "pasa/io.h"
#include "pasa/metrics.h"
#include "pasa/policy.h"
#include "output_paths.h"
#include "policy_options.h"
#include "stage.h"
#include "tensor_files.h"
#include "io/atomic_file.h"
#include "text/format.h"

namespace pasa::cli {
namespace {

struct RunOptions {
  std::string q, k, v, qkv, out, lse, policy = "exact", alignment = "bottom_right";
  bool causal = false, check = false;
  std::optional<double> scale;
};

std::string shape_text(const TensorView& t) {
  return text::format("[{}, {}, {}, {}] {}", t.shape[0], t.shape[1], t.shape[2], t.shape[3],
                      dtype_name(t.dtype));
}

void run(const RunOptions& opt) {
  // The options themselves first (usage errors), then the files they name.
  if (opt.qkv.empty() && (opt.q.empty() || opt.k.empty() || opt.v.empty())) {
    throw UsageError("give --q, --k and --v (or --qkv FILE.safetensors)");
  }
  AttentionArgs args;
  // The API's spellings; the hyphenated ones are accepted too.
  if (opt.alignment == "top_left" || opt.alignment == "top-left") {
    args.alignment = CausalAlignment::top_left;
  } else if (opt.alignment != "bottom_right" && opt.alignment != "bottom-right") {
    throw UsageError("--alignment: '" + opt.alignment + "' is not bottom_right or top_left");
  }
  args.policy = parse_policy_option("--policy", opt.policy);
  if (opt.scale) {
    try {
      check_scale(*opt.scale, args.policy, "--scale");
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  args.scale = opt.scale;
  args.causal = opt.causal;
  check_tensor_output_name("--out", opt.out);
  check_tensor_output_name("--lse", opt.lse);
  check_output_files({{"--q", opt.q}, {"--k", opt.k}, {"--v", opt.v}, {"--qkv", opt.qkv}},
                     {{"--out", opt.out}, {"--lse", opt.lse}});

  HostTensor q, k, v;
  run_stage("reading the inputs", [&] {
    if (!opt.qkv.empty()) {
      std::map<std::string, HostTensor> tensors;
      try {
        tensors = io::read_safetensors(opt.qkv);
      } catch (const ResourceError&) {
        throw;
      } catch (const Error& e) {  // with the option, which takes .safetensors (a .npy given is named so)
        throw Error(std::string("--qkv: ") + e.what());
      }
      for (const char* name : {"q", "k", "v"}) {
        if (!tensors.count(name)) throw Error(opt.qkv + ": no tensor named '" + name + "'");
      }
      q = std::move(tensors["q"]);
      k = std::move(tensors["k"]);
      v = std::move(tensors["v"]);
    } else {
      q = load_tensor_file(opt.q, "q");
      k = load_tensor_file(opt.k, "k");
      v = load_tensor_file(opt.v, "v");
    }
  });
  // (errors name the option the tensor came from: with --qkv, its file and the tensor in it)
  const auto source = [&](const char* name) {
    return opt.qkv.empty() ? std::string("--") + name : text::format("--qkv {}: tensor '{}'", opt.qkv, name);
  };
  args.q = q.view(source("q"));
  args.k = k.view(source("k"));
  args.v = v.view(source("v"));
  {  // the problem before its outputs are allocated (a file's header may claim any shape, a size 0 too)
    AttentionArgs problem = args;
    problem.o = args.q;  // (o's shape and dtype: check_attention_problem reads no memory)
    problem.lse = LseView{};
    try {
      check_attention_problem(problem);
    } catch (const Error& e) {  // (its errors name q, k and v: with --qkv, tensors of that file)
      if (opt.qkv.empty()) throw;
      throw Error(text::format("--qkv {}: {}", opt.qkv, e.what()));
    }
  }
  // O in the inputs' dtype, or where they differ in one that holds each of them (V wider than Q gave
  // an fp16 O of inf where the result passes 65504).
  const DType o_dtype = q.dtype == k.dtype && q.dtype == v.dtype ? q.dtype : DType::f32;
  HostTensor o;
  std::vector<float> lse;
  run_stage("allocating the output and LSE", [&] {
    o = HostTensor{o_dtype, q.shape, std::vector<std::uint8_t>(q.bytes.size() / dtype_size(q.dtype) *
                                                               dtype_size(o_dtype))};
    lse.resize(static_cast<std::size_t>(q.shape[0] * q.shape[1] * q.shape[2]));
  });
  args.o = o.view("output");
  args.lse = lse_view(lse.data(), q.shape[0], q.shape[1], q.shape[2]);

  // (standard error where --out or --lse is standard output: check_output_files chose it)
  FILE* report = text::report_stream();
  text::print(report, "q {}  k {}  v {}\npolicy {}{}\n", shape_text(args.q), shape_text(args.k), shape_text(args.v),
              to_string(args.policy), opt.causal ? text::format("  causal ({})", opt.alignment) : "");
  std::fflush(report);  // what is being computed, seen before a long run (and kept if it is killed)
  const auto t0 = std::chrono::steady_clock::now();
  run_stage("the attention (CPU emulator)", [&] { attention(args); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  text::print(report, "time {:.3f} s (CPU emulator)\n", seconds);
  std::fflush(report);

  // The outputs are written before --check runs: a reference that fails (out of memory) then costs
  // the check, not the computed result. They are written together: all of them or none.
  const HostTensor lse_tensor = from_float(lse, {q.shape[0], q.shape[1], q.shape[2]}, DType::f32);
  write_checked_outputs([&] {
    io::detail::FileBatch outputs;
    if (!opt.out.empty()) outputs.add(opt.out, tensor_file_bytes(opt.out, "o", o));
    if (!opt.lse.empty()) outputs.add(opt.lse, tensor_file_bytes(opt.lse, "lse", lse_tensor));
    outputs.commit();
  });
  for (const std::string& path : {opt.out, opt.lse}) {
    if (!path.empty()) text::print(report, "wrote {}\n", path);
  }
  std::fflush(report);  // (what was written, kept in the log if the check is killed)

  if (opt.check) {
    const ErrorMetrics m = run_stage("the fp64 reference (--check)", [&] {
      const ReferenceResult ref = reference_attention(args);
      const std::vector<float> got = to_float(o);
      return compare(std::vector<double>(got.begin(), got.end()), ref.o);
    });
    text::print(report, "check against fp64: relative RMSE {:.3e}  max abs error {:.3e}  CosSim {:.6f}  "
                "relative L1 {:.3e}  non-finite share {:.4f}%\n",
                m.rel_rmse, m.max_abs, m.cos_sim, m.rel_l1, 100.0 * m.nan_share);
  }
}

}  // namespace

void add_run_command(Command& app) {
  auto opt = std::make_shared<RunOptions>();
  Command* cmd = app.add_subcommand(
      "run", "Run attention on Q/K/V from .npy/.safetensors files ([B, H, S, D]) on the CPU under a "
             "precision policy; --check compares with the fp64 reference.");
  const Option* q = cmd->add_option("--q", opt->q, "query tensor file: .npy, or .safetensors (its tensor named q, else its only one)");
  const Option* k = cmd->add_option("--k", opt->k, "key tensor file (as --q: a tensor named k)");
  const Option* v = cmd->add_option("--v", opt->v, "value tensor file (as --q: a tensor named v)");
  cmd->add_option("--qkv", opt->qkv, "one .safetensors file holding tensors named q, k and v (not with --q, --k, --v)")
      ->excludes(q)
      ->excludes(k)
      ->excludes(v);
  cmd->add_option("--policy", opt->policy,
                  "precision policy: a preset (" + text::join(preset_names(), ", ") +
                      ") and key=value overrides, e.g. pasa,beta=0.968994,s2=64 (keys: docs/api.md)")
      ->capture_default_str();
  const Option* causal = cmd->add_flag("--causal", opt->causal, "causal mask");
  cmd->add_option("--alignment", opt->alignment,
                  "causal alignment (with --causal): bottom_right (query i sees keys <= i + S_kv - S_q) or "
                  "top_left (keys <= i); bottom-right and top-left are taken too")
      ->capture_default_str()
      ->needs(causal);
  cmd->add_option("--scale", opt->scale, "softmax scale (default 1/sqrt(D))");
  cmd->add_option("--out", opt->out,
                  "write O here (in the inputs' dtype, f32 where Q, K and V differ): .npy (bf16 with descr "
                  "'bfloat16', which np.load reads once ml_dtypes is imported), or .safetensors (one tensor "
                  "named o); a name without an extension is written as given in .npy format");
  cmd->add_option("--lse", opt->lse,
                  "write the LSE here (fp32 [B, H, S_q]): .npy, or .safetensors (one tensor named lse)");
  cmd->add_flag("--check", opt->check,
                "compare with the fp64 reference: relative RMSE, max abs error, CosSim, relative L1 and "
                "the share of O that is not finite (after the outputs are written)");
  cmd->callback([opt] { run(*opt); });
}

}  // namespace pasa::cli
