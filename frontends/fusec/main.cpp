// fusec: the command line of the fuse compiler.
//
//   fusec FILE.expr --emit=KIND [-o OUT]     print a stage of the compilation, or render it
//   fusec run FILE.expr [options]            run the program on .npy or random inputs
//   fusec cache stats|clear                  the disk cache of compiled CPU kernels
//
// Every stage and target comes from the driver (frontends/compile.h); this file is the command
// line. Exit status: 0 on success, 1 for errors in the user's program, inputs or flags, 2 for
// internal errors. The emit kinds, targets and flags are tables: a new stage or backend is one row.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <functional>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/cpu_codegen.h"
#include "frontends/compile.h"
#include "frontends/expr/compile.h"
#include "frontends/render.h"
#include "ir/dot.h"
#include "ir/error.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "ir/rounding_model.h"
#include "ir/program.h"
#include "passes/pipeline.h"
#include "runtime/bundle.h"
#include "runtime/compare.h"
#include "runtime/npy.h"

namespace fuse {
namespace {

using ir::Error;

// ---- The tables ----

/// What `--emit` can produce: the output of one of the driver's stages (frontends/compile.h),
/// available for the targets that have that stage.
struct EmitKind {
  std::string_view name;
  std::string_view help;
  Stage stage;
  bool is_dot;     // Graphviz dot of the graph (--fused: of the Program), so `-o x.svg` / `-o x.png` renders it
  bool is_binary;  // not text: only written to a file (bundle: a directory)
};
const EmitKind kEmitKinds[] = {
    {"graph", "the graph IR as text", Stage::Graph, false, false},
    {"dot", "the graph as Graphviz dot (--fused: kernels as clusters); -o x.svg or -o x.png draws it", Stage::Graph,
     true, false},
    {"fused", "the fused Program as text: buffers, kernels, schedules", Stage::Program, false, false},
    {"plan", "the fused Program as JSON (schema in docs/architecture.md); --target=cuda: the CUDA launch plan",
     Stage::Plan, false, false},
    {"mlir", "the kernels in MLIR, before lowering (--target=cuda: the gpu.module)", Stage::Mlir, false, false},
    {"llvm", "the kernels in LLVM IR, after lowering, before LLVM's optimizations (--target=cuda: NVVM IR)",
     Stage::Llvm, false, false},
    {"asm", "the CPU kernels as this machine's assembly", Stage::Asm, false, false},
    {"obj", "the CPU kernels as an ELF object file (needs -o FILE.o)", Stage::Object, false, true},
    {"ptx", "with --target=cuda: the kernels as PTX (libdevice linked; no GPU needed)", Stage::Ptx, false, false},
    {"bundle", "with --target=cuda: an AOT bundle for fuse-run (kernels.ptx, plan.json, constants) in -o DIR",
     Stage::Ptx, false, true},
};

/// Compiles once for `fusec run`; the Runner it returns runs.
using Runner = std::function<void(const ir::TensorMap& inputs, ir::TensorMap& outputs)>;
using PrepareRunner = Runner (*)(const ir::Graph& g, const Target& target, const CompileOptions& options);

/// What `--target` names: what the schedules are for (`fusec FILE`) and where `fusec run` runs.
struct TargetChoice {
  std::string_view name;
  std::string_view help;
  Target (*target)();  // before --cpu and --sm refine it
  bool compiles;       // a choice for `fusec FILE` (interp only runs)
  PrepareRunner prepare;
};
const TargetChoice kTargets[] = {
    {"cpu",
     "this machine's CPU: MLIR -> LLVM -> machine code, loaded in process (the default; --cpu=DESC schedules for "
     "another CPU)",
     Target::host, true,
     [](const ir::Graph& g, const Target& target, const CompileOptions& options) -> Runner {
       auto exe = std::make_shared<runtime::Executable>(compile(g, target, options));
       return [exe](const ir::TensorMap& inputs, ir::TensorMap& outputs) { exe->run(inputs, outputs); };
     }},
    {"cuda",
     "NVIDIA GPUs: PTX for --sm=NN (default GPU 0's compute capability, at most 90; 80 without a GPU); run: on "
     "GPU 0 through the CUDA driver",
     [] { return Target::cuda(); }, true,
     [](const ir::Graph& g, const Target& target, const CompileOptions& options) -> Runner {
       // compile_cuda asks GPU 0 first: without one, this is where `run` stops, saying why.
       std::shared_ptr<runtime::CudaExecutable> exe = compile_cuda(g, target, options);
       // Host arrays in and out: each run uploads, launches, waits and downloads.
       return [exe](const ir::TensorMap& inputs, ir::TensorMap& outputs) { outputs = exe->run_host(inputs); };
     }},
    {"cuda-sim",
     "run only: the CUDA kernels on the simulated device (no GPU needed; docs/cuda-simulator.md; --sim-checks)",
     Target::cuda_sim, false,
     [](const ir::Graph& g, const Target& target, const CompileOptions& options) -> Runner {
       std::shared_ptr<runtime::CudaExecutable> exe = compile_cuda(g, target, options);
       return [exe](const ir::TensorMap& inputs, ir::TensorMap& outputs) { outputs = exe->run_host(inputs); };
     }},
    {"interp", "run only: the fused Program (CPU schedules), kernel by kernel, in the reference interpreter",
     Target::host, false,
     [](const ir::Graph& g, const Target& target, const CompileOptions& options) -> Runner {
       ir::Program program = run_passes(g, target, options).result.program;
       return [program](const ir::TensorMap& inputs, ir::TensorMap& outputs) {
         outputs = ir::interpret_program(program, inputs);
       };
     }},
};

/// "1.5 MiB (1572864 bytes)".
std::string size_text(int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) value /= 1024, ++unit;
  if (unit == 0) return std::to_string(bytes) + " bytes";
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << value << " " << units[unit] << " (" << bytes << " bytes)";
  return s.str();
}

/// What `fusec cache ACTION` does to the disk cache of compiled CPU kernels.
struct CacheAction {
  std::string_view name;
  std::string_view help;
  void (*run)();
};
const CacheAction kCacheActions[] = {
    {"stats", "print the cache's directory, entry count, total size and size limit",
     [] {
       codegen::DiskCacheUsage usage = codegen::disk_cache_usage();
       std::cout << "directory  " << usage.directory << "\n"
                 << "entries    " << usage.entries << "\n"
                 << "size       " << size_text(usage.bytes) << "\n"
                 << "limit      " << size_text(usage.limit)
                 << (std::getenv("FUSE_CACHE_MAX_BYTES") ? ", from $FUSE_CACHE_MAX_BYTES\n"
                                                          : ", the default ($FUSE_CACHE_MAX_BYTES sets it)\n");
     }},
    {"clear", "remove every entry (other files in the directory are left alone)",
     [] {
       int64_t removed = codegen::clear_disk_cache();
       std::cout << "removed " << removed << (removed == 1 ? " entry" : " entries") << " from "
                 << codegen::cache_directory() << "\n";
     }},
};

enum Command : unsigned { kCompile = 1, kRun = 2 };

struct Flag {
  std::string_view name;
  std::string_view value;  // what the value is called; empty for a switch
  unsigned commands;       // the Commands that accept it
  bool repeatable;
  std::string_view help;
  std::string_view example;
};
const Flag kFlags[] = {
    {"--emit", "KIND", kCompile, false, "what to print (kinds below)",
     "fusec examples/hypot.expr --emit=graph"},
    {"-o", "FILE", kCompile, false,
     "write to FILE instead of stdout; a .svg or .png FILE is drawn",
     "fusec examples/softmax.expr --emit=dot -o softmax.svg"},
    {"--fused", "", kCompile, false, "with --emit=dot: draw the fused kernels as clusters",
     "fusec examples/softmax.expr --emit=dot --fused -o softmax.svg"},
    {"--dump-after", "PASS", kCompile, false, "print the graph after a pass (broadcast, simplify)",
     "fusec examples/softmax.expr --dump-after=broadcast"},
    {"--explain-fusion", "", kCompile, false, "print the kernels and why each boundary between them exists",
     "fusec examples/mlp.expr --explain-fusion"},
    {"--target", "NAME", kCompile | kRun, false,
     "what to compile for (cpu, cuda; default cpu); run: where to run (cpu, cuda, interp; default cpu, "
     "machine code for this CPU)",
     "fusec run examples/add.expr --target=interp --random --dim N=8"},
    {"--sm", "NN", kCompile, false,
     "with --target=cuda: the compute capability (default: GPU 0's, at most 90; 80 without a GPU)",
     "fusec examples/softmax.expr --target=cuda --sm=90 --emit=ptx -o softmax.ptx"},
    {"--cpu", "DESC", kCompile | kRun, false,
     "schedule for another CPU: avx512|avx2, l1=, l2=, l3= cache sizes, cores=, stream= (bytes moved above which outputs are written non-temporally: 32M where a later kernel reads them, 8M for results), stream_results= (results only) (the rest as this machine)",
     "fusec run examples/mlp.expr --random --cpu=avx2,l1=48K,l2=2M,l3=480M --check"},
    {"--no-fusion", "", kCompile | kRun, false, "every op its own kernel (the unfused baseline)",
     "fusec examples/softmax.expr --emit=fused --no-fusion"},
    {"--fast-math", "", kCompile | kRun, false, "allow rewrites that ignore NaN, inf and -0.0 (x + 0 -> x)",
     "fusec examples/add.expr --emit=fused --fast-math"},
    {"--no-cache", "", kRun, false, "compile afresh: neither read nor write the compile cache (~/.cache/fuse)",
     "fusec run examples/hypot.expr --random --dim N=1000 --no-cache"},
    {"--cache-stats", "", kRun, false, "print what the compile cache did (memory/disk hits, compilations) to stderr",
     "fusec run examples/hypot.expr --random --dim N=1000 --cache-stats"},
    {"--input", "NAME=FILE.npy", kRun, true, "the value of input NAME, from a .npy file",
     "fusec run examples/add.expr --input a=a.npy --input b=b.npy"},
    {"--random", "", kRun, false,
     "generate the inputs not given by --input (floats in [-1, 1), ints in [0, 10), bools)",
     "fusec run examples/matmul.expr --random --dim M=4 --dim K=3 --dim N=2"},
    {"--dim", "SYM=N", kRun, true, "with --random: the size of shape symbol SYM",
     "fusec run examples/hypot.expr --random --dim N=1000"},
    {"--seed", "S", kRun, false, "with --random: the random seed (default 0)",
     "fusec run examples/hypot.expr --random --dim N=10 --seed 7"},
    {"--out", "DIR", kRun, false, "write each output to DIR/NAME.npy",
     "fusec run examples/hypot.expr --random --dim N=10 --out results"},
    {"--check", "", kRun, false,
     "compare every output with the reference interpreter on the unfused graph under its rounding "
     "model (each element within 2x its error bound + 4 ulps; docs/testing.md); print the max abs "
     "and rel error and the max error in units of the allowed one; exit 1 beyond it",
     "fusec run examples/softmax.expr --random --dim N=64 --dim M=1000 --check"},
    {"--bench", "N", kRun, false,
     "time N runs after a warm-up: median wall time and GB/s over the inputs' and outputs' bytes",
     "fusec run examples/add.expr --random --dim N=1000 --dim M=10000 --bench 20"},
    {"--versus", "FILE", kRun, false,
     "with --bench: also time FILE.expr on the same inputs, the two alternated in random order in one "
     "process; print both medians, their ratio and how far their outputs differ",
     "fusec run examples/softmax.expr --random --dim N=65536 --dim M=64 --bench 50 --versus other.expr"},
    {"--versus-cpu", "DESC", kRun, false,
     "with --bench: compile the --versus program (default: FILE itself) for CPU DESC, e.g. to compare schedules",
     "fusec run examples/matmul.expr --random --dim M=512 --dim K=512 --dim N=512 --bench 30 --versus-cpu=l2=1M"},
    {"--cold", "", kRun, false,
     "with --bench: before each timed run, write a buffer twice the last-level cache, so that the "
     "run's data comes from memory (as in fuse_bench, whose rows run interleaved)",
     "fusec run examples/softmax.expr --random --dim N=65536 --dim M=64 --bench 50 --cold"},
    {"--print", "", kRun, false,
     "print each output as NumPy does (the default without --out, --check or --bench)",
     "fusec run examples/hypot.expr --random --dim N=10 --out results --print"},
    {"--sim-checks", "LIST", kRun, false,
     "with --target=cuda-sim: the simulator's checks, all (default), none, or a comma list of sync, race, memcheck",
     "fusec run examples/softmax.expr --target=cuda-sim --random --dim N=64 --dim M=5000 --sim-checks=race --check"},
    {"--help", "", kCompile | kRun, false, "show this help", "fusec --help"},
    {"--version", "", kCompile | kRun, false, "show the version", "fusec --version"},
};

// ---- Suggestions for misspellings ----

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t substitute = diagonal + (a[i - 1] != b[j - 1]);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

/// "; did you mean 'x'?" for the closest candidate when it is close enough, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& candidates) {
  std::string_view best;
  size_t best_distance = SIZE_MAX;
  for (std::string_view c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  // Every one-letter name is one edit from every other: suggest only real near-misses.
  bool close = best_distance <= std::max<size_t>(1, best.size() / 3) && best_distance < word.size();
  return close ? "; did you mean '" + std::string(best) + "'?" : "";
}

template <class Row, size_t N>
std::vector<std::string_view> names_of(const Row (&table)[N]) {
  std::vector<std::string_view> names;
  for (const Row& r : table) names.push_back(r.name);
  return names;
}

template <class Row, size_t N>
std::string joined_names(const Row (&table)[N]) {
  std::string s;
  for (std::string_view n : names_of(table)) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

/// The row named `name`, or an Error listing the choices and the likely one.
template <class Row, size_t N>
const Row& lookup(const Row (&table)[N], const std::string& name, const std::string& what) {
  for (const Row& r : table)
    if (r.name == name) return r;
  throw Error("unknown " + what + " '" + name + "'" + did_you_mean(name, names_of(table)) +
              " (choices: " + joined_names(table) + ")");
}

// ---- Command line ----

struct Args {
  Command command = kCompile;
  std::vector<std::string> positional;
  std::map<std::string_view, std::vector<std::string>> flags;  // name -> values, in order

  bool has(std::string_view name) const { return flags.count(name) > 0; }
  const std::string* value(std::string_view name) const {
    auto it = flags.find(name);
    return it == flags.end() ? nullptr : &it->second.back();
  }
  const std::vector<std::string>& values(std::string_view name) const {
    static const std::vector<std::string> none;
    auto it = flags.find(name);
    return it == flags.end() ? none : it->second;
  }
};

const Flag& find_flag(const std::string& name, Command command) {
  std::vector<std::string_view> accepted;
  for (const Flag& f : kFlags) {
    if (f.name == name) {
      if (f.commands & command) return f;
      throw Error(name + (command == kRun ? " is not an option of `fusec run`"
                                          : " is an option of `fusec run` only"));
    }
    if (f.commands & command) accepted.push_back(f.name);
  }
  throw Error("unknown flag '" + name + "'" + did_you_mean(name, accepted) +
              " (see fusec --help)");
}

Args parse_args(const std::vector<std::string>& argv) {
  Args args;
  size_t i = 0;
  if (!argv.empty() && argv[0] == "run") args.command = kRun, i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-') {
      args.positional.push_back(arg);
      continue;
    }
    size_t eq = arg.starts_with("--") ? arg.find('=') : std::string::npos;
    const Flag& flag = find_flag(arg.substr(0, eq), args.command);
    std::string value;
    if (eq != std::string::npos) {
      if (flag.value.empty()) throw Error(std::string(flag.name) + " takes no value");
      value = arg.substr(eq + 1);
    } else if (!flag.value.empty()) {
      if (i + 1 == argv.size())
        throw Error(std::string(flag.name) + " needs a value: " + std::string(flag.name) + " " +
                    std::string(flag.value));
      value = argv[++i];
    }
    std::vector<std::string>& values = args.flags[flag.name];
    if (!values.empty() && !flag.repeatable)
      throw Error(std::string(flag.name) + " is given more than once");
    values.push_back(value);
  }
  return args;
}

// --help and --version: listed once, apart from the options of each command.
bool is_general(const Flag& f) { return f.name == "--help" || f.name == "--version"; }

std::string help_text() {
  std::ostringstream out;
  out << "fusec " FUSE_VERSION " - the fuse tensor-expression compiler\n\n"
         "usage:\n"
         "  fusec FILE.expr --emit=KIND [-o OUT]\n"
         "  fusec run FILE.expr [--target=NAME] [--input NAME=FILE.npy]... [--random [--dim "
         "SYM=N]... [--seed S]] [--out DIR] [--print]\n"
         "  fusec cache ACTION\n";
  for (auto [command, title] : {std::pair{kCompile, "compile options"}, {kRun, "fusec run options"}}) {
    out << "\n" << title << ":\n";
    for (const Flag& f : kFlags) {
      if (!(f.commands & command) || is_general(f)) continue;
      // "--emit=KIND", but "-o FILE" and "--input NAME=FILE.npy", which read better spaced.
      bool spaced = !f.name.starts_with("--") || f.value.find('=') != std::string_view::npos;
      std::string head = std::string(f.name);
      if (!f.value.empty()) head += (spaced ? " " : "=") + std::string(f.value);
      out << "  " << head << (head.size() < 20 ? std::string(20 - head.size(), ' ') : "\n" + std::string(22, ' '))
          << f.help << "\n" << std::string(22, ' ') << "e.g. " << f.example << "\n";
    }
  }
  out << "\nemit kinds:\n";
  for (const EmitKind& k : kEmitKinds) out << "  " << k.name << std::string(10 - k.name.size(), ' ') << k.help << "\n";
  out << "\ntargets (--target=NAME):\n";
  for (const TargetChoice& t : kTargets)
    out << "  " << t.name << std::string(10 - t.name.size(), ' ') << t.help << "\n";
  out << "\ncache actions (the disk cache of compiled CPU kernels, in $FUSE_CACHE_DIR, else\n"
         "$XDG_CACHE_HOME/fuse, else ~/.cache/fuse; at most $FUSE_CACHE_MAX_BYTES, default 1G,\n"
         "least recently used entries out):\n";
  for (const CacheAction& a : kCacheActions)
    out << "  " << a.name << std::string(10 - a.name.size(), ' ') << a.help << "\n";
  out << "\nother:\n";
  for (const Flag& f : kFlags) {
    if (!is_general(f)) continue;
    out << "  " << f.name << std::string(20 - f.name.size(), ' ') << f.help << "\n";
  }
  out << "\nexit status: 0 success, 1 an error in the program, inputs or flags, 2 an internal "
         "error\n";
  return out.str();
}

// ---- Files ----

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error("cannot write '" + path + "': " + std::strerror(errno));
}

/// Splits "NAME=VALUE" for `flag`, both parts non-empty.
std::pair<std::string, std::string> split_assignment(const std::string& s, std::string_view flag) {
  size_t eq = s.find('=');
  if (eq == 0 || eq == std::string::npos || eq + 1 == s.size())
    throw Error(std::string(flag) + " expects NAME=VALUE, got '" + s + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

template <class Int>
Int parse_int(const std::string& s, const std::string& what) {
  Int v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size())
    throw Error(what + " must be an integer, got '" + s + "'");
  return v;
}

/// The program in `path`, compiled; diagnostics go to stderr and give nullopt.
std::optional<ir::Graph> compile_file(const std::string& path) {
  std::string source = read_text(path);
  expr::CompileResult result = expr::compile_expr(source, path);
  if (!result.errors.empty()) {
    std::cerr << expr::format_diagnostics(result.errors, source);
    return std::nullopt;
  }
  if (!result.graph) throw std::logic_error("compile_expr gave neither a graph nor errors");
  return std::move(result.graph);
}

const std::string& the_file(const Args& args) {
  if (args.positional.size() != 1)
    throw Error(args.positional.empty() ? "no .expr file given (see fusec --help)"
                                        : "expected one .expr file, got " +
                                              std::to_string(args.positional.size()) + " arguments");
  return args.positional[0];
}

// ---- fusec FILE --emit=KIND ----

/// The target of a --target choice as the flags refine it: --cpu=DESC describes another CPU,
/// --sm=NN the compute capability (without it the driver asks GPU 0).
Target target_from_flags(const Args& args, const TargetChoice& choice) {
  Target target = choice.target();
  const std::string* cpu = args.value("--cpu");
  const std::string* sm_text = args.value("--sm");
  if (target.kind == TargetKind::Cpu) {
    if (sm_text) throw Error("--sm applies only with --target=cuda");
    return cpu ? Target::cpu(*cpu) : target;
  }
  if (cpu) throw Error("--cpu applies only to CPU targets");
  if (sm_text) {
    auto [end, error] = std::from_chars(sm_text->data(), sm_text->data() + sm_text->size(), target.sm);
    if (error != std::errc() || end != sm_text->data() + sm_text->size() || target.sm < 75)
      throw Error("--sm=" + *sm_text + ": expected a compute capability such as 80 (sm_80); CUDA 13 needs 75 or more");
  }
  return target;
}

/// The --target choice (default cpu); `fusec FILE` accepts only those that compile.
const TargetChoice& target_choice(const Args& args) {
  const TargetChoice& choice = lookup(kTargets, args.value("--target") ? *args.value("--target") : "cpu", "target");
  if (args.command == kCompile && !choice.compiles) {
    // The simulator runs the kernels --target=cuda emits (--emit=llvm: the NVVM IR it rewrites).
    std::string hint = std::string(choice.name) == "cuda-sim" ? "; --target=cuda --emit=... shows the kernels it runs" : "";
    throw Error("--target=" + std::string(choice.name) + " only runs programs: use `fusec run`" + hint);
  }
  return choice;
}

/// The compile options the flags ask for.
CompileOptions compile_options(const Args& args) {
  CompileOptions options;
  options.pipeline.fusion.enabled = !args.has("--no-fusion");
  options.pipeline.simplify.fast_math = args.has("--fast-math");
  options.use_cache = !args.has("--no-cache");
  return options;
}

/// "graph, dot, fused, ..." for the --emit kinds `kind` has.
std::string emit_kinds_for(TargetKind kind) {
  std::string s;
  for (const EmitKind& k : kEmitKinds)
    if (has_stage(kind, k.stage)) s += (s.empty() ? "" : ", ") + std::string(k.name);
  return s;
}

int compile_command(const Args& args) {
  const std::string& file = the_file(args);
  const std::string* emit_name = args.value("--emit");
  const std::string* dump_after = args.value("--dump-after");
  if (!emit_name && !dump_after && !args.has("--explain-fusion"))
    throw Error("nothing to do: pass --emit=KIND (" + joined_names(kEmitKinds) +
                "), --dump-after=PASS or --explain-fusion, or use `fusec run`");
  const EmitKind* kind = emit_name ? &lookup(kEmitKinds, *emit_name, "--emit kind") : nullptr;
  if (args.has("--fused") && (!kind || !kind->is_dot)) throw Error("--fused applies only with --emit=dot");
  if (dump_after) {
    const auto& passes = passes::pipeline_pass_names();
    std::vector<std::string_view> names(passes.begin(), passes.end());
    if (std::find(passes.begin(), passes.end(), *dump_after) == passes.end())
      throw Error("unknown pass '" + *dump_after + "'" + did_you_mean(*dump_after, names));
  }
  const TargetChoice& choice = target_choice(args);
  Target target = target_from_flags(args, choice);
  if (kind && !has_stage(target.kind, kind->stage))
    throw Error(target.kind == TargetKind::Cuda
                    ? "--emit=" + *emit_name + " is for the CPU (CUDA emits: " + emit_kinds_for(TargetKind::Cuda) + ")"
                    : "--emit=" + *emit_name + " needs --target=cuda");
  std::optional<ir::Graph> graph = compile_file(file);
  if (!graph) return 1;

  CompileOptions options = compile_options(args);
  if (dump_after)
    options.pipeline.after_pass = [&](const std::string& pass, const ir::Graph& after) {
      if (pass == *dump_after) std::cout << "// after " << pass << "\n" << ir::print_graph(after);
    };
  Compilation compiled = run_passes(*graph, target, options);
  if (args.has("--explain-fusion")) std::cout << passes::explain_fusion(compiled.result.graph, compiled.result.partition);
  if (!kind) return 0;

  const std::string* out = args.value("-o");
  if (kind->name == "bundle") {
    if (!out) throw Error("--emit=bundle writes a directory: give it with -o DIR");
    runtime::write_bundle(*out, cuda_program(compiled));
    return 0;
  }
  if (kind->is_binary && !out) throw Error("--emit=" + *emit_name + " is binary: write it to a file with -o FILE");
  std::string title = std::filesystem::path(file).stem().string();
  std::string text;
  if (!kind->is_dot) text = emit(compiled, kind->stage);
  else if (args.has("--fused")) text = ir::program_to_dot(compiled.result.program, title);
  else text = ir::graph_to_dot(compiled.graph, title);
  if (!out) {
    std::cout << text;
    return 0;
  }
  std::string format = std::filesystem::path(*out).extension().string();
  if (!format.empty()) format.erase(0, 1);
  if (is_image_format(format)) {
    if (!kind->is_dot)
      throw Error("--emit=" + *emit_name + " is text; only dot output can be drawn as ." + format);
    text = render_dot(text, format);
  }
  write_file(*out, text);
  return 0;
}

// ---- fusec run ----

/// Fills `a` with the --random distribution, from a stream that depends only on the seed and
/// the input's name (so adding an input does not change the others).
void fill_random(ir::HostArray& a, uint64_t seed, const std::string& name) {
  uint64_t name_hash = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : name) name_hash = (name_hash ^ c) * 1099511628211ull;
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(name_hash), static_cast<uint32_t>(name_hash >> 32)};
  std::mt19937_64 rng(seq);
  for (int64_t i = 0; i < a.size(); ++i) {
    uint64_t bits = rng();
    switch (a.dtype) {
      // Uniform in [-1, 1) with as many random bits as the type's mantissa holds exactly.
      case ir::DType::F32: a.as<float>()[i] = -1.0f + static_cast<float>(bits >> 40) * 0x1p-23f; break;
      case ir::DType::F64: a.as<double>()[i] = -1.0 + static_cast<double>(bits >> 11) * 0x1p-52; break;
      case ir::DType::Bool: a.bytes[i] = bits & 1; break;
      case ir::DType::I32:
      case ir::DType::I64: a.set_i64(i, static_cast<int64_t>(bits % 10)); break;
    }
  }
}

/// The sizes of shape symbols for --random: from --dim, checked against the given inputs.
ir::SymbolBindings random_bindings(const Args& args, const ir::Graph& g, const ir::TensorMap& given) {
  std::set<std::string> symbols;
  for (ir::NodeId id : g.input_nodes())
    for (const ir::Dim& d : g.node(id).shape) for (const std::string& s : d.symbol_names()) symbols.insert(s);
  ir::SymbolBindings bindings;
  for (const std::string& dim : args.values("--dim")) {
    auto [sym, size] = split_assignment(dim, "--dim");
    if (!symbols.count(sym)) {
      std::vector<std::string_view> names(symbols.begin(), symbols.end());
      throw Error("--dim " + sym + ": the program has no shape symbol '" + sym + "'" +
                  did_you_mean(sym, names));
    }
    int64_t n = parse_int<int64_t>(size, "--dim " + sym);
    if (n < 0) throw Error("--dim " + sym + " must not be negative, got " + size);
    bindings[sym] = n;
  }
  for (const auto& [name, array] : given)
    if (const ir::Node* n = g.find_input(name))
      ir::bind_symbols(n->shape, array.shape, bindings, "input '" + name + "'");
  return bindings;
}

/// --check: every output against the interpreter on the source graph, each element within the
/// error bound of the rounding model (ir/rounding_model.h, runtime::compare_arrays with bounds);
/// bounded_error gives the figures printed.
int check_outputs(const ir::Graph& graph, const ir::TensorMap& inputs, const ir::TensorMap& outputs) {
  ir::ValuesAndBounds expected = ir::interpret_with_bounds(graph, inputs);
  bool ok = true;
  for (const ir::GraphOutput& o : graph.outputs) {
    const ir::HostArray& want = expected.values.at(o.name);
    const ir::HostArray& bounds = expected.bounds.at(o.name);
    const ir::HostArray& got = outputs.at(o.name);
    std::string mismatch = runtime::compare_arrays(want, got, bounds, "output '" + o.name + "'");
    runtime::BoundedError e = runtime::bounded_error(want, got, bounds);
    std::string unchecked = e.unchecked ? ", " + std::to_string(e.unchecked) + " uncertain elements unchecked" : "";
    std::printf("check %s: max abs error %.3g, max rel error %.3g, %.3g of the allowed error%s: %s\n", o.name.c_str(),
                e.max_abs, e.max_rel, e.max_in_bounds, unchecked.c_str(), mismatch.empty() ? "ok" : "MISMATCH");
    if (!mismatch.empty()) std::printf("  %s\n", mismatch.c_str());
    ok = ok && mismatch.empty();
  }
  return ok ? 0 : 1;
}

/// --cold: writes a line of every 64 bytes of `buffer` (twice the last-level cache, sized by the
/// caller), so that the next run reads its inputs and writes its outputs from memory, as in
/// fuse_bench, whose rows interleave with other programs' (there, warm runs of a kernel on
/// rows of 64 f32 took a third less time than cold ones, and a change faster warm was slower cold).
void evict_caches(std::vector<char>& buffer) {
  static unsigned char round = 0;
  ++round;
  for (size_t b = 0; b < buffer.size(); b += 64) buffer[b] = static_cast<char>(round);
}

/// One program --bench times: its runner and its outputs.
struct Timed {
  std::string label;
  Runner runner;
  ir::TensorMap outputs;
  std::vector<double> seconds;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// --bench: the median of `runs` timed runs after one warm-up run. With --versus, both programs
/// run once per round in a random order (so the machine's drift hits them alike), and their
/// outputs are compared: in one process a difference of a few percent shows where two runs of
/// `fusec run --bench` on a noisy machine differ by 10-20%.
void bench(std::vector<Timed>& programs, const ir::TensorMap& inputs, int runs, std::vector<char>& cold) {
  if (runs < 1) throw Error("--bench needs at least 1 run");
  for (Timed& p : programs) p.runner(inputs, p.outputs);  // warm-up: first touches of the memory, caches
  double bytes = 0;
  for (const auto& [name, a] : inputs) bytes += static_cast<double>(a.bytes.size());
  for (const auto& [name, a] : programs[0].outputs) bytes += static_cast<double>(a.bytes.size());
  std::mt19937 rng(1);
  std::vector<size_t> order(programs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (int i = 0; i < runs; ++i) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t p : order) {
      evict_caches(cold);
      auto start = std::chrono::steady_clock::now();
      programs[p].runner(inputs, programs[p].outputs);
      programs[p].seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  double first = median_of(programs[0].seconds);
  for (Timed& p : programs) {
    double median = median_of(p.seconds);
    std::string label = programs.size() > 1 ? " " + p.label + ":" : "";
    char ratio[64] = "";
    if (&p != &programs[0]) std::snprintf(ratio, sizeof ratio, ", %.3fx the first's speed", first / median);
    std::printf("bench:%s median %.3f ms over %d runs, %.2f GB/s (%.1f MB moved)%s\n", label.c_str(), median * 1e3,
                runs, bytes / median / 1e9, bytes / 1e6, ratio);
  }
  for (size_t p = 1; p < programs.size(); ++p)
    for (const auto& [name, want] : programs[0].outputs) {
      auto got = programs[p].outputs.find(name);
      if (got == programs[p].outputs.end()) {
        std::printf("versus: %s has no output '%s'\n", programs[p].label.c_str(), name.c_str());
        continue;
      }
      if (got->second.shape != want.shape || got->second.dtype != want.dtype) {
        std::printf("versus: output '%s' is %s %s in the first, %s %s in %s\n", name.c_str(),
                    std::string(ir::dtype_name(want.dtype)).c_str(), ir::shape_str(want.shape).c_str(),
                    std::string(ir::dtype_name(got->second.dtype)).c_str(), ir::shape_str(got->second.shape).c_str(),
                    programs[p].label.c_str());
        continue;
      }
      // The largest difference relative to the output's largest magnitude (NaN where one is NaN
      // and the other not).
      double diff = 0, scale = 0;
      for (int64_t i = 0; i < want.size(); ++i) {
        double a = want.get_f64(i), b = got->second.get_f64(i);
        scale = std::max(scale, std::abs(a));
        if (std::isnan(a) != std::isnan(b)) diff = NAN;
        else if (a != b && !std::isnan(diff)) diff = std::max(diff, std::abs(a - b));
      }
      std::printf("versus: output '%s' max |difference| %.3g (%.3g of its largest |element|)\n", name.c_str(), diff,
                  scale > 0 ? diff / scale : diff);
    }
}

int run_command(const Args& args) {
  const std::string& file = the_file(args);
  const TargetChoice& choice = target_choice(args);
  Target target = target_from_flags(args, choice);
  bool random = args.has("--random");
  for (std::string_view flag : {"--dim", "--seed"})
    if (args.has(flag) && !random) throw Error(std::string(flag) + " applies only with --random");

  std::optional<ir::Graph> graph = compile_file(file);
  if (!graph) return 1;

  ir::TensorMap inputs;
  for (const std::string& spec : args.values("--input")) {
    auto [name, path] = split_assignment(spec, "--input");
    if (inputs.count(name)) throw Error("--input " + name + " is given more than once");
    inputs[name] = runtime::read_npy(path);
  }
  if (random) {
    ir::SymbolBindings bindings = random_bindings(args, *graph, inputs);
    uint64_t seed = args.has("--seed") ? parse_int<uint64_t>(*args.value("--seed"), "--seed") : 0;
    for (ir::NodeId id : graph->input_nodes()) {
      const ir::Node& n = graph->node(id);
      const std::string& name = n.as<ir::InputAttrs>().name;
      if (inputs.count(name)) continue;
      for (const ir::Dim& d : n.shape)
        for (const std::string& sym : d.symbol_names())
          if (!bindings.count(sym))
            throw Error("input '" + name + "' has shape " + ir::shape_str(n.shape) +
                        ": give the size of " + sym + " with --dim " + sym + "=SIZE");
      ir::ConcreteShape shape = ir::evaluate(n.shape, bindings);
      int64_t bytes = static_cast<int64_t>(ir::dtype_size(n.dtype));
      for (int64_t d : shape)
        if (__builtin_mul_overflow(bytes, d, &bytes))
          throw Error("input '" + name + "' of shape " + ir::shape_str(shape) + " is too large");
      ir::HostArray a(n.dtype, shape);
      fill_random(a, seed, name);
      inputs[name] = std::move(a);
    }
  }

  if (const std::string* checks = args.value("--sim-checks")) {
    if (!target.simulated) throw Error("--sim-checks applies only with --target=cuda-sim");
    std::stringstream list(*checks);
    for (std::string item; std::getline(list, item, ',');)
      if (item != "sync" && item != "race" && item != "memcheck" && !((item == "all" || item == "none") && *checks == item))
        throw Error("--sim-checks: unknown check '" + item + "' (all, none, or a comma list of sync, race, memcheck)");
    setenv("FUSE_CUDA_SIM_CHECKS", checks->c_str(), 1);
  }
  Runner runner = choice.prepare(*graph, target, compile_options(args));
  if (args.has("--cache-stats")) {
    codegen::CacheStats stats = codegen::cache_stats();
    std::cerr << "cache: " << stats.memory_hits << " memory hits, " << stats.disk_hits << " disk hits, "
              << stats.compilations << " compilations, " << stats.rejected_entries << " rejected entries ("
              << codegen::cache_directory() << ")\n";
  }
  ir::TensorMap outputs;
  runner(inputs, outputs);
  int status = 0;
  if (args.has("--check")) status = check_outputs(*graph, inputs, outputs);
  bool versus = args.has("--versus") || args.has("--versus-cpu");
  if (versus && !args.has("--bench")) throw Error("--versus and --versus-cpu apply only with --bench");
  if (args.has("--cold") && !args.has("--bench")) throw Error("--cold applies only with --bench");
  if (const std::string* runs = args.value("--bench")) {
    std::vector<Timed> programs;
    programs.push_back({file, runner, {}, {}});
    if (versus) {
      const std::string* other_file = args.value("--versus");
      std::optional<ir::Graph> other = other_file ? compile_file(*other_file) : graph;
      if (!other) return 1;
      Target other_target = target;
      std::string label = other_file ? *other_file : file;
      if (const std::string* cpu = args.value("--versus-cpu")) {
        if (target.kind != TargetKind::Cpu) throw Error("--versus-cpu applies only to CPU targets");
        other_target = Target::cpu(*cpu);
        label += " (--cpu=" + *cpu + ")";
      }
      programs.push_back({label, choice.prepare(*other, other_target, compile_options(args)), {}, {}});
    }
    std::vector<char> cold;  // --cold's buffer, untouched (empty) without it
    if (args.has("--cold")) cold.assign(static_cast<size_t>(std::max<int64_t>(2 * Target::host().l3_bytes, int64_t{64} << 20)), 0);
    bench(programs, inputs, parse_int<int>(*runs, "--bench"), cold);
    outputs = std::move(programs[0].outputs);
  }

  if (const std::string* dir = args.value("--out")) {
    std::error_code ec;
    std::filesystem::create_directories(*dir, ec);
    if (ec) throw Error("cannot create directory '" + *dir + "': " + ec.message());
    for (const auto& [name, value] : outputs)
      runtime::write_npy((std::filesystem::path(*dir) / (name + ".npy")).string(), value);
  }
  bool quiet = args.has("--out") || args.has("--check") || args.has("--bench");
  if (args.has("--print") || !quiet) {
    // In the graph's output order, not the map's alphabetical one.
    for (const ir::GraphOutput& o : graph->outputs)
      std::cout << runtime::array_repr(outputs.at(o.name), o.name + " = ") << "\n";
  }
  return status;
}

// ---- fusec cache ACTION ----

int cache_command(const std::vector<std::string>& argv) {
  if (argv.size() < 2) throw Error("fusec cache needs an action: " + joined_names(kCacheActions));
  const CacheAction& action = lookup(kCacheActions, argv[1], "cache action");
  if (argv.size() > 2) throw Error("fusec cache " + argv[1] + " takes no arguments (got '" + argv[2] + "')");
  action.run();
  return 0;
}

int fusec(const std::vector<std::string>& argv) {
  if (argv.empty()) {
    std::cerr << "usage: fusec FILE.expr --emit=KIND [-o OUT] | fusec run FILE.expr [options] | fusec cache ACTION\n"
                 "see fusec --help\n";
    return 1;
  }
  if (argv[0] == "cache") return cache_command(argv);
  Args args = parse_args(argv);
  if (args.has("--help")) {
    std::cout << help_text();
    return 0;
  }
  if (args.has("--version")) {
    std::cout << "fusec " FUSE_VERSION "\n";
    return 0;
  }
  return args.command == kRun ? run_command(args) : compile_command(args);
}

}  // namespace
}  // namespace fuse

int main(int argc, char** argv) {
  try {
    return fuse::fusec(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const fuse::ir::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory (are the input sizes right?)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 2;
  } catch (...) {
    std::cerr << "internal error: unknown exception\n";
    return 2;
  }
}
