// Random graphs with issue 16's NumPy ops (tests/random_graph.h, `numpy_ops`): basic indexing,
// concatenate/stack, pad, argmax/argmin, cumsum/cumprod and stencils mixed with everything the
// older random graphs draw. The fused program must give the interpreter's bits; the CPU backend
// and the CUDA simulator must match it within the rounding model's bounds. A failure prints the
// seed, the graph and the program; FUSE_NP_RANDOM_GRAPHS=N changes how many seeds run.
//
// The [gather_scatter] cases add take, take_along_axis, index_add, bincount and histogram
// (`gather_scatter_ops`): indices valid by construction, scatters after elementwise prologues,
// takes of reductions, scans and matmuls and in their epilogues. CTest also runs their CPU case
// under FUSE_NUM_THREADS=1 and 7 (tests/CMakeLists.txt). FUSE_NP_RANDOM_FIRST_SEED=S starts their
// seeds elsewhere, for long runs: FUSE_NP_RANDOM_GRAPHS=5000 test_np_random "[gather_scatter]".
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "frontends/compile.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "tests/random_graph.h"

using namespace fuse;

namespace {

// The CUDA cases run on the simulator with every check on: set before the driver loads.
const bool kSimulator = [] {
  setenv("FUSE_CUDA_SIM", "1", 1);
  return setenv("FUSE_CUDA_SIM_CHECKS", "all", 1) == 0;
}();

int graph_count(int usual) {
  const char* env = std::getenv("FUSE_NP_RANDOM_GRAPHS");
  if (env && *env) return std::atoi(env);
  return FUSE_SANITIZED ? usual / 10 : usual;
}

testing::RandomCase numpy_case(uint64_t seed) {
  testing::RandomGraphOptions options;
  options.numpy_ops = true;
  options.associative_combiners = seed % 2 == 1;  // as test_cuda_sim: CUDA folds those in chunks
  return testing::random_case(seed, options);
}

testing::RandomCase gather_scatter_case(uint64_t seed) {
  testing::RandomGraphOptions options;
  options.numpy_ops = true;
  options.gather_scatter_ops = true;
  options.associative_combiners = seed % 2 == 1;
  return testing::random_case(seed, options);
}

uint64_t gather_scatter_seed(int i) {
  const char* env = std::getenv("FUSE_NP_RANDOM_FIRST_SEED");
  uint64_t first = env && *env ? std::strtoull(env, nullptr, 10) : 170000;
  return first + static_cast<uint64_t>(i);
}

// Which gather/scatter ops the cases drew (a test that never drew one would check nothing).
const char* const kGatherScatterNotes[] = {"take", "take_along_axis", "index_add", "bincount", "histogram"};

bool drew(const testing::RandomCase& c, const std::string& note) {
  std::string notes = c.description.substr(c.description.find(';') == std::string::npos ? c.description.size()
                                                                                        : c.description.find(';'));
  for (size_t at = notes.find(note); at != std::string::npos; at = notes.find(note, at + 1)) {
    bool starts = notes[at - 1] == ' ', ends = at + note.size() == notes.size() || notes[at + note.size()] == ',' ||
                                              notes[at + note.size()] == '.';
    if (starts && ends) return true;
  }
  return false;
}

bool every_bound_finite(const ir::ValuesAndBounds& v) {
  for (const auto& [name, bounds] : v.bounds)
    for (int64_t i = 0; i < bounds.size(); ++i)
      if (std::isinf(bounds.get_f64(i))) return false;
  return true;
}

// How many of the cases drew a NumPy op at all (a test that never drew one would check nothing).
bool drew_numpy_op(const testing::RandomCase& c) {
  for (const char* name : {"index", "concatenate", "stack", "pad.", "argm", "cum", "stencil"})
    if (c.description.find(name) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("random graphs with NumPy ops: the fused program gives the interpreter's bits", "[np_random]") {
  int count = graph_count(2000), with_numpy = 0, failures = 0;
  for (int i = 0; i < count && failures < 5; ++i) {
    uint64_t seed = 160000 + static_cast<uint64_t>(i);
    testing::RandomCase c = numpy_case(seed);
    with_numpy += drew_numpy_op(c);
    std::string mismatch;
    ir::Program program;
    try {
      ir::TensorMap expected = ir::interpret(c.graph, c.inputs);
      for (bool fused : {true, false}) {
        passes::PipelineOptions options;
        options.fusion.enabled = fused;
        program = passes::run_pipeline(c.graph, options).program;
        mismatch = testing::compare_outputs(expected, ir::interpret_program(program, c.inputs), 0, 0);
        if (!mismatch.empty()) break;
      }
    } catch (const std::exception& e) {
      mismatch = std::string("threw: ") + e.what();
    }
    INFO(c.description << "\n" << ir::print_graph(c.graph) << ir::print_program(program));
    CHECK(mismatch == "");
    failures += !mismatch.empty();
  }
  WARN(with_numpy << " of " << count << " graphs drew a NumPy op");
  CHECK(with_numpy > count / 2);
}

TEST_CASE("random graphs with NumPy ops on the CPU match the interpreter", "[np_random][cpu]") {
  int count = graph_count(300), failures = 0;
  for (int i = 0; i < count && failures < 5; ++i) {
    uint64_t seed = 160000 + static_cast<uint64_t>(i);
    testing::RandomCase c = numpy_case(seed);
    std::string mismatch, program;
    try {
      ir::ValuesAndBounds expected = ir::interpret_with_bounds(c.graph, c.inputs);
      runtime::Executable exe = compile(c.graph);
      program = ir::print_program(exe.program());
      mismatch = testing::compare_outputs(expected, exe.run(c.inputs));
    } catch (const std::exception& e) {
      mismatch = std::string("threw: ") + e.what();
    }
    INFO(c.description << "\n" << ir::print_graph(c.graph) << program);
    CHECK(mismatch == "");
    failures += !mismatch.empty();
  }
}

TEST_CASE("random graphs with NumPy ops on the CUDA simulator match the interpreter", "[np_random][cuda][sim]") {
  int count = graph_count(150), failures = 0;
  for (int i = 0; i < count && failures < 5; ++i) {
    uint64_t seed = 160000 + static_cast<uint64_t>(i);
    testing::RandomCase c = numpy_case(seed);
    std::string mismatch;
    try {
      ir::ValuesAndBounds expected = ir::interpret_with_bounds(c.graph, c.inputs);
      mismatch = testing::compare_outputs(expected, compile_cuda(c.graph, Target::cuda_sim())->run_host(c.inputs));
    } catch (const std::exception& e) {
      mismatch = std::string("threw: ") + e.what();
    }
    INFO(c.description << "\n" << ir::print_graph(c.graph));
    CHECK(mismatch == "");
    failures += !mismatch.empty();
  }
}

// ------------------------------------------------------------------------------------------------
// Gather/scatter ops (issue 16): take, take_along_axis, index_add, bincount, histogram.

TEST_CASE("random graphs with gather and scatter ops: the fused program gives the interpreter's bits",
          "[np_random][gather_scatter]") {
  int count = graph_count(1000), failures = 0;
  std::map<std::string, int> drawn;
  for (int i = 0; i < count && failures < 5; ++i) {
    uint64_t seed = gather_scatter_seed(i);
    testing::RandomCase c = gather_scatter_case(seed);
    for (const char* note : kGatherScatterNotes) drawn[note] += drew(c, note);
    std::string mismatch;
    ir::Program program;
    try {
      ir::TensorMap expected = ir::interpret(c.graph, c.inputs);
      for (bool fused : {true, false}) {
        passes::PipelineOptions options;
        options.fusion.enabled = fused;
        program = passes::run_pipeline(c.graph, options).program;
        mismatch = testing::compare_outputs(expected, ir::interpret_program(program, c.inputs), 0, 0);
        if (!mismatch.empty()) break;
      }
    } catch (const std::exception& e) {
      mismatch = std::string("threw: ") + e.what();
    }
    INFO(c.description << "\n" << ir::print_graph(c.graph) << ir::print_program(program));
    CHECK(mismatch == "");
    failures += !mismatch.empty();
  }
  std::string counts;
  for (const auto& [note, n] : drawn) counts += " " + note + "=" + std::to_string(n);
  WARN(count << " graphs; graphs drawing each op:" << counts);
  for (const char* note : kGatherScatterNotes) CHECK(drawn[note] > count / 20);
}

TEST_CASE("random graphs with gather and scatter ops on the CPU match the interpreter",
          "[np_random][gather_scatter][cpu]") {
  int count = graph_count(150), failures = 0, bounded = 0;
  for (int i = 0; i < count && failures < 5; ++i) {
    uint64_t seed = gather_scatter_seed(i);
    testing::RandomCase c = gather_scatter_case(seed);
    std::string mismatch, program;
    try {
      ir::ValuesAndBounds expected = ir::interpret_with_bounds(c.graph, c.inputs);
      bounded += every_bound_finite(expected);
      runtime::Executable exe = compile(c.graph);
      program = ir::print_program(exe.program());
      mismatch = testing::compare_outputs(expected, exe.run(c.inputs));
    } catch (const std::exception& e) {
      mismatch = std::string("threw: ") + e.what();
    }
    INFO(c.description << "\n" << ir::print_graph(c.graph) << program);
    CHECK(mismatch == "");
    failures += !mismatch.empty();
  }
  // An index that may differ makes a gather's bounds infinite (ir/rounding_model.cpp): most
  // cases must still be checked element by element.
  WARN(bounded << " of " << count << " cases had finite bounds on every output element");
  CHECK(bounded > count * 3 / 4);
}

TEST_CASE("random graphs with gather and scatter ops on the CUDA simulator match the interpreter",
          "[np_random][gather_scatter][cuda][sim]") {
  int count = graph_count(80), failures = 0;
  for (int i = 0; i < count && failures < 5; ++i) {
    uint64_t seed = gather_scatter_seed(i);
    testing::RandomCase c = gather_scatter_case(seed);
    std::string mismatch;
    try {
      ir::ValuesAndBounds expected = ir::interpret_with_bounds(c.graph, c.inputs);
      mismatch = testing::compare_outputs(expected, compile_cuda(c.graph, Target::cuda_sim())->run_host(c.inputs));
    } catch (const std::exception& e) {
      mismatch = std::string("threw: ") + e.what();
    }
    INFO(c.description << "\n" << ir::print_graph(c.graph));
    CHECK(mismatch == "");
    failures += !mismatch.empty();
  }
}
