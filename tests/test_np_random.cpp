// Random graphs with issue 16's NumPy ops (tests/random_graph.h, `numpy_ops`): basic indexing,
// concatenate/stack, pad, argmax/argmin, cumsum/cumprod and stencils mixed with everything the
// older random graphs draw. The fused program must give the interpreter's bits; the CPU backend
// and the CUDA simulator must match it within the rounding model's bounds. A failure prints the
// seed, the graph and the program; FUSE_NP_RANDOM_GRAPHS=N changes how many seeds run.
#include <catch2/catch.hpp>

#include <cstdlib>

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
