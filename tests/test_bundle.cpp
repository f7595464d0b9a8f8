// AOT bundles: dims as text, the plan's JSON, write/read round trips, and clear errors for
// missing and corrupt bundles. No GPU and no driver needed.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "ir/error.h"
#include "runtime/bundle.h"
#include "runtime/json.h"
#include "runtime/npy.h"
#include "tests/cuda_test_programs.h"

namespace fs = std::filesystem;
using fuse::ir::Dim;
using fuse::ir::Error;
using fuse::runtime::CudaProgram;
using fuse::runtime::Json;
using fuse::runtime::read_bundle;
using fuse::runtime::write_bundle;
using Catch::Matchers::Contains;

namespace {

/// A fresh directory under the build tree for one test.
fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::path(FUSE_BINARY_DIR) / "tests" / "bundles" / name;
  fs::remove_all(dir);
  fs::create_directories(dir.parent_path());
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void spit(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

/// The test program with a compound dim in a buffer and a grid rule, and a scratch allocation.
CudaProgram sample_program() {
  CudaProgram p = fuse_test::vadd_scale_program(2.5f);
  p.plan.symbols.push_back("M");
  p.buffers.push_back({"wide", fuse::ir::DType::I64, {fuse::ir::parse_dim("2*N*M"), 3}, fuse::ir::BufferRole::Output, -1});
  p.outputs.push_back({"wide", 4});
  p.plan.scratch_bytes = {4096};
  p.plan.launches[1].work[1] = fuse::ir::parse_dim("2*M");
  p.plan.launches[1].work_per_block[1] = 2;
  p.plan.launches[1].max_grid = {1000, 20, 1};
  p.plan.launches[1].shared_bytes = 1024;
  p.plan.launches[1].args.push_back({fuse::ir::CudaArg::Kind::Scratch, 0});
  p.plan.launches[1].args.push_back({fuse::ir::CudaArg::Kind::Buffer, 4});
  p.plan.launches[1].args.push_back({fuse::ir::CudaArg::Kind::Symbol, 1});
  return p;
}

/// Writes the sample bundle, applies `spoil` to its directory and returns read_bundle's error.
std::string corrupt(const std::string& name, const std::function<void(const fs::path&)>& spoil) {
  fs::path dir = temp_dir(name);
  write_bundle(dir.string(), sample_program());
  spoil(dir);
  return error_of([&] { read_bundle(dir.string()); });
}

/// Replaces the first `from` in plan.json by `to`.
std::function<void(const fs::path&)> edit_plan(const std::string& from, const std::string& to) {
  return [=](const fs::path& dir) {
    std::string text = slurp(dir / "plan.json");
    size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    spit(dir / "plan.json", text.replace(at, from.size(), to));
  };
}

}  // namespace

TEST_CASE("dims parse from their printed form", "[bundle]") {
  CHECK(fuse::ir::parse_dim("4") == Dim(4));
  CHECK(fuse::ir::parse_dim("0") == Dim(0));
  CHECK(fuse::ir::parse_dim("N") == Dim::symbol("N"));
  CHECK(fuse::ir::parse_dim("2*N*M") == Dim(2) * Dim::symbol("M") * Dim::symbol("N"));
  CHECK(fuse::ir::parse_dim(" N * 2 ") == Dim(2) * Dim::symbol("N"));
  CHECK(fuse::ir::parse_dim("batch_size") == Dim::symbol("batch_size"));
  for (const char* s : {"7", "N", "2*M*N", "3*K"}) CHECK(fuse::ir::parse_dim(s).str() == s);
  CHECK(error_of([] { fuse::ir::parse_dim(""); }) == "'' is not a dim (a factor is missing; expected e.g. 4, N or 2*N*M)");
  CHECK(error_of([] { fuse::ir::parse_dim("N*"); }) == "'N*' is not a dim (a factor is missing; expected e.g. 4, N or 2*N*M)");
  CHECK(error_of([] { fuse::ir::parse_dim("N M"); }) == "'N M' is not a dim (unexpected 'M'; expected e.g. 4, N or 2*N*M)");
  CHECK(error_of([] { fuse::ir::parse_dim("-1"); }) == "'-1' is not a dim (a dim cannot be negative; expected e.g. 4, N or 2*N*M)");
  CHECK(error_of([] { fuse::ir::parse_dim("N+"); }) == "'N+' is not a dim (a factor is missing; expected e.g. 4, N or 2*N*M)");
  CHECK(error_of([] { fuse::ir::parse_dim("N / 2"); }) ==
        "'N / 2' is not a dim (unexpected '/' (division is '//'); expected e.g. 4, N or 2*N*M)");
  CHECK(error_of([] { fuse::ir::parse_dim("N // M"); }) ==
        "'N // M' is not a dim (the divisor of '//' must be a positive constant; expected e.g. 4, N or 2*N*M)");
  CHECK(error_of([] { fuse::ir::parse_dim("min(N)"); }) ==
        "'min(N)' is not a dim (min needs two or more arguments; expected e.g. 4, N or 2*N*M)");
  CHECK(error_of([] { fuse::ir::parse_dim("max(N, 2"); }) == "'max(N, 2' is not a dim (')' is missing; expected e.g. 4, N or 2*N*M)");
  // Dim expressions print and parse back to the same canonical form.
  for (const char* s : {"N - 2", "max(N - 2, 0)", "N // 2", "(N + 1) // 2", "3 - N", "-N - 2", "2*(N // 2)",
                        "min(N // 2, 5)", "M*max(N - 2, 0)", "(M*N) // 2", "N*N - 1", "max(M, N, 0)"})
    CHECK(fuse::ir::parse_dim(s).str() == s);
  CHECK(fuse::ir::parse_dim("max( N-2 ,0)") == fuse::ir::dim_max(Dim::symbol("N") - 2, 0));
  CHECK(fuse::ir::parse_dim("(2*N + 1) // 2") == Dim::symbol("N"));
  CHECK_THAT(error_of([] { fuse::ir::parse_dim("99999999999999999999"); }), Contains("overflows 64 bits"));
}

TEST_CASE("JSON: parse, print, typed access and errors with positions", "[bundle]") {
  Json j = Json::parse(R"({"a": [1, -2, 3.5e2], "b": {"c": "x\"\\\n\u0041"}, "d": true, "e": null})", "t.json");
  CHECK(j.at("a", "t").items("a")[1].as_int("a[1]") == -2);
  CHECK(j.at("b", "t").at("c", "b").as_string("b.c") == "x\"\\\nA");
  CHECK(Json::parse(j.dump(), "again").dump() == j.dump());
  CHECK(error_of([&] { j.at("a", "t").items("a")[2].as_int("a[2]"); }) == "a[2] is 3.5e2, not a 64-bit integer");
  CHECK(error_of([&] { j.at("zz", "plan"); }) == "plan has no \"zz\"");
  CHECK(error_of([&] { j.at("d", "t").as_string("d"); }) == "d is a boolean, not a string");
  CHECK(error_of([] { Json::parse("{\"a\": [1, 2}", "f.json"); }) == "f.json:1:12: expected ']'");
  CHECK(error_of([] { Json::parse("{\n  \"a\": 1,\n  \"a\": 2}", "f.json"); }) == "f.json:3:7: duplicate member \"a\"");
  CHECK(error_of([] { Json::parse("[1] x", "f.json"); }) == "f.json:1:5: unexpected text after the document");
  CHECK(error_of([] { Json::parse("\"abc", "f.json"); }) == "f.json:1:5: unterminated string");
  CHECK(error_of([] { Json::parse("", "f.json"); }) == "f.json:1:1: unexpected end of the document");
}

TEST_CASE("a bundle round-trips: buffers, interface, plan, constants and PTX", "[bundle]") {
  fs::path dir = temp_dir("round_trip");
  CudaProgram p = sample_program();
  write_bundle(dir.string(), p);
  CHECK(fs::is_regular_file(dir / "kernels.ptx"));
  CHECK(fs::is_regular_file(dir / "plan.json"));
  CHECK(fs::is_regular_file(dir / "constant_0.npy"));
  CHECK_THAT(slurp(dir / "plan.json"), Contains("\"version\": 1") && Contains("\"shape\": [\"2*M*N\", \"3\"]"));

  CudaProgram q = read_bundle(dir.string());
  REQUIRE(q.buffers.size() == p.buffers.size());
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    CHECK(q.buffers[i].name == p.buffers[i].name);
    CHECK(q.buffers[i].dtype == p.buffers[i].dtype);
    CHECK(q.buffers[i].shape == p.buffers[i].shape);
    CHECK(q.buffers[i].role == p.buffers[i].role);
    CHECK(q.buffers[i].slot == p.buffers[i].slot);
  }
  auto same_io = [](const std::vector<fuse::ir::ProgramIO>& a, const std::vector<fuse::ir::ProgramIO>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].name != b[i].name || a[i].buffer != b[i].buffer) return false;
    return true;
  };
  CHECK(same_io(q.inputs, p.inputs));
  CHECK(same_io(q.outputs, p.outputs));
  CHECK(q.num_slots == p.num_slots);
  CHECK(q.plan.sm == p.plan.sm);
  CHECK(q.plan.symbols == p.plan.symbols);
  CHECK(q.plan.scratch_bytes == p.plan.scratch_bytes);
  REQUIRE(q.plan.constants.size() == 1);
  CHECK(q.plan.constants[0].dtype == p.plan.constants[0].dtype);
  CHECK(q.plan.constants[0].shape == p.plan.constants[0].shape);
  CHECK(q.plan.constants[0].bytes == p.plan.constants[0].bytes);
  REQUIRE(q.plan.launches.size() == p.plan.launches.size());
  for (size_t i = 0; i < p.plan.launches.size(); ++i) {
    const fuse::ir::CudaLaunch &a = p.plan.launches[i], &b = q.plan.launches[i];
    CHECK(b.entry == a.entry);
    CHECK(b.kernel == a.kernel);
    CHECK(b.block == a.block);
    CHECK(b.work == a.work);
    CHECK(b.work_per_block == a.work_per_block);
    CHECK(b.max_grid == a.max_grid);
    CHECK(b.shared_bytes == a.shared_bytes);
    CHECK(b.args == a.args);
  }
  CHECK(q.ptx == p.ptx);
  // The same plan prints the same JSON: nothing is lost or reordered.
  CHECK(fuse::runtime::bundle_plan_json(q) == fuse::runtime::bundle_plan_json(p));

  // A trailing NUL (what the driver wants) is not written into the .ptx file.
  CudaProgram with_nul = p;
  with_nul.ptx.push_back('\0');
  write_bundle(dir.string(), with_nul);
  CHECK(slurp(dir / "kernels.ptx") == p.ptx);
}

TEST_CASE("writing refuses an inconsistent program", "[bundle]") {
  CudaProgram p = sample_program();
  p.plan.launches[0].args[0].index = 42;
  CHECK(error_of([&] { write_bundle(temp_dir("bad_write").string(), p); }) ==
        "cannot write bundle '" + temp_dir("bad_write").string() + "': launch 'vadd_f32' passes buffer 42 but there are 5");
}

TEST_CASE("missing and corrupt bundles give errors naming the file and the problem", "[bundle]") {
  fs::path missing = temp_dir("missing");
  CHECK(error_of([&] { read_bundle(missing.string()); }) == "bundle '" + missing.string() + "' is not a directory");

  std::string plan = (fs::path(FUSE_BINARY_DIR) / "tests" / "bundles").string();
  auto in_plan = [&](const std::string& name, const std::string& message) {
    return (fs::path(plan) / name / "plan.json").string() + ": " + message;
  };
  CHECK(corrupt("no_plan", [](const fs::path& d) { fs::remove(d / "plan.json"); }) ==
        "bundle '" + plan + "/no_plan' has no plan.json");
  CHECK(corrupt("no_ptx", [](const fs::path& d) { fs::remove(d / "kernels.ptx"); }) ==
        "bundle '" + plan + "/no_ptx' has no kernels.ptx");
  CHECK(corrupt("truncated", [](const fs::path& d) {
          std::string text = slurp(d / "plan.json");
          spit(d / "plan.json", text.substr(0, text.size() / 2));
        }).rfind((fs::path(plan) / "truncated" / "plan.json").string() + ":", 0) == 0);
  CHECK(corrupt("not_a_plan", [](const fs::path& d) { spit(d / "plan.json", "[1, 2]"); }) ==
        in_plan("not_a_plan", "not a fuse CUDA bundle plan (\"format\" must be \"fuse-cuda-bundle\")"));
  CHECK(corrupt("version", edit_plan("\"version\": 1", "\"version\": 7")) ==
        in_plan("version", "format version 7, but this fuse reads version 1 (rebuild the bundle with a matching fusec)"));
  CHECK(corrupt("no_entry", edit_plan("\"entry\": \"vadd_f32\",", "")) ==
        in_plan("no_entry", "launches[0] has no \"entry\""));
  CHECK(corrupt("dtype", edit_plan("\"dtype\": \"f32\"", "\"dtype\": \"f16\"")) ==
        in_plan("dtype", "buffers[0].dtype: unknown dtype 'f16'"));
  CHECK(corrupt("dim", edit_plan("\"shape\": [\"N\"]", "\"shape\": [\"N+\"]")) ==
        in_plan("dim", "buffers[0].shape[0]: 'N+' is not a dim (a factor is missing; expected e.g. 4, N or 2*N*M)"));
  CHECK(corrupt("kind", edit_plan("\"kind\": \"scratch\"", "\"kind\": \"texture\"")) ==
        in_plan("kind", "launches[1].args[4].kind: unknown argument kind 'texture' (buffer, constant, scratch or symbol)"));
  CHECK(corrupt("block", edit_plan("\"block\": [256, 1, 1]", "\"block\": [256, 1]")) ==
        in_plan("block", "launches[0].block must have 3 entries (x, y, z), not 2"));
  CHECK(corrupt("type", edit_plan("\"num_slots\": 1", "\"num_slots\": \"one\"")) ==
        in_plan("type", "num_slots is a string, not an integer"));
  CHECK(corrupt("index", edit_plan("\"index\": 3", "\"index\": 30")) ==
        in_plan("index", "launch 'scale_f32' passes buffer 30 but there are 5"));
  CHECK(corrupt("no_constant", [](const fs::path& d) { fs::remove(d / "constant_0.npy"); }) ==
        in_plan("no_constant", "constant file constant_0.npy is missing from the bundle"));
  CHECK_THAT(corrupt("bad_constant", [](const fs::path& d) { spit(d / "constant_0.npy", "not numpy"); }),
             Contains("constant_0.npy"));
  CHECK(corrupt("escape", edit_plan("\"constant_0.npy\"", "\"../x.npy\"")) ==
        in_plan("escape", "constants[0]: '../x.npy' is not a file name in the bundle"));
}

TEST_CASE("parse_bundle reads a bundle's files from memory", "[bundle]") {
  CudaProgram p = sample_program();
  std::map<std::string, std::string> files = {{"plan.json", fuse::runtime::bundle_plan_json(p)},
                                              {"kernels.ptx", p.ptx},
                                              {"constant_0.npy", fuse::runtime::serialize_npy(p.plan.constants[0])}};
  auto from = [](const std::map<std::string, std::string>& f) {
    return [&f](const std::string& name) -> std::optional<std::string> {
      auto it = f.find(name);
      return it == f.end() ? std::nullopt : std::optional(it->second);
    };
  };
  CudaProgram q = fuse::runtime::parse_bundle(from(files), "mem");
  CHECK(fuse::runtime::bundle_plan_json(q) == fuse::runtime::bundle_plan_json(p));
  CHECK(q.ptx == p.ptx);
  std::map<std::string, std::string> no_ptx = files;
  no_ptx.erase("kernels.ptx");
  CHECK(error_of([&] { fuse::runtime::parse_bundle(from(no_ptx), "mem"); }) == "bundle 'mem' has no kernels.ptx");
  std::map<std::string, std::string> bad_constant = files;
  bad_constant["constant_0.npy"] = "";
  CHECK(error_of([&] { fuse::runtime::parse_bundle(from(bad_constant), "mem"); }) ==
        "mem/plan.json: mem/constant_0.npy: not a .npy file (no \\x93NUMPY magic)");
}

// Found while writing tests/fuzz/fuzz_bundle.cpp (10^6 fuzzed runs found nothing more): a path
// that named another file, and hostile plans that took quadratic time.
TEST_CASE("hostile inputs: clean errors, and no quadratic time", "[bundle][fuzz]") {
  // A NUL ends the path early: "constant_0.npy\u0000x" would read constant_0.npy.
  CHECK(corrupt("nul_name", edit_plan("\"constant_0.npy\"", "\"constant_0.npy\\u0000x\"")) ==
        (fs::path(FUSE_BINARY_DIR) / "tests" / "bundles" / "nul_name" / "plan.json").string() +
            ": constants[0]: 'constant_0.npy" + std::string(1, '\0') + "x' is not a file name in the bundle");
  CHECK(error_of([] { fuse::ir::parse_dim("4294967296*N*4294967296"); }) ==
        "'4294967296*N*4294967296' is not a dim (the product overflows 64 bits; expected e.g. 4, N or 2*N*M)");
  CHECK(fuse::ir::parse_dim("N*0*M") == Dim(0));
  // Long products and big objects took quadratic time (10^9 and more steps for these; a hang for
  // a hostile plan.json of a few MB): the symbols were re-sorted at each factor, and each member
  // name was compared with all those before it.
  std::string product = "K";
  for (int i = 0; i < 50000; ++i) product += i % 2 ? "*K" : "*1";
  CHECK(fuse::ir::parse_dim(product).terms.at(0).atoms.size() == 25001);
  // Deep nesting is refused, not a stack overflow.
  CHECK_THAT(error_of([] { fuse::ir::parse_dim(std::string(100000, '(') + "N"); }), Contains("nested too deeply"));
  CHECK_THAT(error_of([] { fuse::ir::parse_dim(std::string(100000, '-') + "N"); }), Contains("nested too deeply"));
  std::string object = "{";
  for (int i = 0; i < 100000; ++i) object += (i ? ", \"m" : "\"m") + std::to_string(i) + "\": " + std::to_string(i);
  CHECK(Json::parse(object + "}", "big.json").at("m99999", "big").as_int("m99999") == 99999);
}
