#include "runtime/bundle.h"

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <type_traits>

#include "ir/error.h"
#include "runtime/json.h"
#include "runtime/npy.h"

namespace fuse::runtime {

namespace fs = std::filesystem;
using ir::Error;

namespace {

constexpr const char* kFormatName = "fuse-cuda-bundle";

std::string constant_file(size_t i) { return "constant_" + std::to_string(i) + ".npy"; }

const char* arg_kind_name(ir::CudaArg::Kind k) {
  switch (k) {
    case ir::CudaArg::Kind::Buffer: return "buffer";
    case ir::CudaArg::Kind::Constant: return "constant";
    case ir::CudaArg::Kind::Scratch: return "scratch";
    case ir::CudaArg::Kind::Symbol: return "symbol";
  }
  return "?";
}

Json shape_json(const ir::Shape& shape) {
  Json j = Json::array();
  for (const ir::Dim& d : shape) j.push(d.str());
  return j;
}

template <class T, size_t N>
Json triple(const std::array<T, N>& values) {
  Json j = Json::array();
  for (const T& v : values) j.push(static_cast<int64_t>(v));
  return j;
}

Json io_json(const std::vector<ir::ProgramIO>& ios) {
  Json j = Json::array();
  for (const ir::ProgramIO& io : ios) {
    Json e = Json::object();
    e.set("name", io.name);
    e.set("buffer", io.buffer);
    j.push(std::move(e));
  }
  return j;
}

void write_file(const fs::path& path, const std::string& contents) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  f.close();
  if (!f) throw Error("cannot write " + path.string());
}

/// A bundle file's bytes; nullopt when it is not a regular file.
std::optional<std::string> read_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  if (!f) throw Error("cannot read " + path.string());
  return s.str();
}

std::string required_file(const BundleFiles& files, const std::string& name, const std::string& dir) {
  std::optional<std::string> bytes = files(name);
  if (!bytes) throw Error("bundle '" + dir + "' has no " + name);
  return std::move(*bytes);
}

// ---- Reading plan.json: each function names the JSON path it reads in its errors. ----

int to_int(int64_t v, const std::string& path) {
  if (v < INT32_MIN || v > INT32_MAX) throw Error(path + " is out of range: " + std::to_string(v));
  return static_cast<int>(v);
}

ir::Dim dim_at(const Json& j, const std::string& path) {
  try {
    return ir::parse_dim(j.as_string(path));
  } catch (const Error& e) {
    throw Error(path + ": " + e.message());
  }
}

ir::Shape shape_at(const Json& j, const std::string& path) {
  ir::Shape s;
  const std::vector<Json>& items = j.items(path);
  for (size_t i = 0; i < items.size(); ++i) s.push_back(dim_at(items[i], path + "[" + std::to_string(i) + "]"));
  return s;
}

template <class T>
std::array<T, 3> triple_at(const Json& j, const std::string& path) {
  const std::vector<Json>& items = j.items(path);
  if (items.size() != 3) throw Error(path + " must have 3 entries (x, y, z), not " + std::to_string(items.size()));
  std::array<T, 3> out{};
  for (int i = 0; i < 3; ++i) {
    std::string p = path + "[" + std::to_string(i) + "]";
    if constexpr (std::is_same_v<T, ir::Dim>) out[i] = dim_at(items[i], p);
    else if constexpr (std::is_same_v<T, int>) out[i] = to_int(items[i].as_int(p), p);
    else out[i] = items[i].as_int(p);
  }
  return out;
}

std::vector<ir::ProgramIO> io_at(const Json& j, const std::string& path) {
  std::vector<ir::ProgramIO> ios;
  const std::vector<Json>& items = j.items(path);
  for (size_t i = 0; i < items.size(); ++i) {
    std::string p = path + "[" + std::to_string(i) + "]";
    ios.push_back({items[i].at("name", p).as_string(p + ".name"), to_int(items[i].at("buffer", p).as_int(p + ".buffer"), p + ".buffer")});
  }
  return ios;
}

ir::Buffer buffer_at(const Json& j, const std::string& path) {
  ir::Buffer b;
  b.name = j.at("name", path).as_string(path + ".name");
  const std::string& dtype = j.at("dtype", path).as_string(path + ".dtype");
  std::optional<ir::DType> t = ir::dtype_from_name(dtype);
  if (!t) throw Error(path + ".dtype: unknown dtype '" + dtype + "'");
  b.dtype = *t;
  b.shape = shape_at(j.at("shape", path), path + ".shape");
  const std::string& role = j.at("role", path).as_string(path + ".role");
  if (role == "input") b.role = ir::BufferRole::Input;
  else if (role == "output") b.role = ir::BufferRole::Output;
  else if (role == "intermediate") b.role = ir::BufferRole::Intermediate;
  else throw Error(path + ".role: unknown role '" + role + "' (input, output or intermediate)");
  b.slot = to_int(j.at("slot", path).as_int(path + ".slot"), path + ".slot");
  return b;
}

ir::CudaLaunch launch_at(const Json& j, const std::string& path) {
  ir::CudaLaunch l;
  l.entry = j.at("entry", path).as_string(path + ".entry");
  l.kernel = to_int(j.at("kernel", path).as_int(path + ".kernel"), path + ".kernel");
  l.block = triple_at<int>(j.at("block", path), path + ".block");
  l.work = triple_at<ir::Dim>(j.at("work", path), path + ".work");
  l.work_per_block = triple_at<int64_t>(j.at("work_per_block", path), path + ".work_per_block");
  l.max_grid = triple_at<int64_t>(j.at("max_grid", path), path + ".max_grid");
  l.shared_bytes = to_int(j.at("shared_bytes", path).as_int(path + ".shared_bytes"), path + ".shared_bytes");
  const std::vector<Json>& args = j.at("args", path).items(path + ".args");
  for (size_t i = 0; i < args.size(); ++i) {
    std::string p = path + ".args[" + std::to_string(i) + "]";
    const std::string& kind = args[i].at("kind", p).as_string(p + ".kind");
    ir::CudaArg a;
    if (kind == "buffer") a.kind = ir::CudaArg::Kind::Buffer;
    else if (kind == "constant") a.kind = ir::CudaArg::Kind::Constant;
    else if (kind == "scratch") a.kind = ir::CudaArg::Kind::Scratch;
    else if (kind == "symbol") a.kind = ir::CudaArg::Kind::Symbol;
    else throw Error(p + ".kind: unknown argument kind '" + kind + "' (buffer, constant, scratch or symbol)");
    a.index = to_int(args[i].at("index", p).as_int(p + ".index"), p + ".index");
    l.args.push_back(a);
  }
  return l;
}

}  // namespace

std::string bundle_plan_json(const CudaProgram& p) {
  Json root = Json::object();
  root.set("format", kFormatName);
  root.set("version", kBundleFormatVersion);
  root.set("sm", p.plan.sm);
  Json symbols = Json::array();
  for (const std::string& s : p.plan.symbols) symbols.push(s);
  root.set("symbols", std::move(symbols));
  Json buffers = Json::array();
  for (const ir::Buffer& b : p.buffers) {
    Json e = Json::object();
    e.set("name", b.name);
    e.set("dtype", std::string(ir::dtype_name(b.dtype)));
    e.set("shape", shape_json(b.shape));
    e.set("role", std::string(ir::buffer_role_name(b.role)));
    e.set("slot", b.slot);
    buffers.push(std::move(e));
  }
  root.set("buffers", std::move(buffers));
  root.set("inputs", io_json(p.inputs));
  root.set("outputs", io_json(p.outputs));
  root.set("num_slots", p.num_slots);
  Json constants = Json::array();
  for (size_t i = 0; i < p.plan.constants.size(); ++i) constants.push(constant_file(i));
  root.set("constants", std::move(constants));
  Json scratch = Json::array();
  for (int64_t bytes : p.plan.scratch_bytes) scratch.push(bytes);
  root.set("scratch_bytes", std::move(scratch));
  Json launches = Json::array();
  for (const ir::CudaLaunch& l : p.plan.launches) {
    Json e = Json::object();
    e.set("entry", l.entry);
    e.set("kernel", l.kernel);
    e.set("block", triple(l.block));
    Json work = Json::array();
    for (const ir::Dim& d : l.work) work.push(d.str());
    e.set("work", std::move(work));
    e.set("work_per_block", triple(l.work_per_block));
    e.set("max_grid", triple(l.max_grid));
    e.set("shared_bytes", l.shared_bytes);
    Json args = Json::array();
    for (const ir::CudaArg& a : l.args) {
      Json arg = Json::object();
      arg.set("kind", arg_kind_name(a.kind));
      arg.set("index", a.index);
      args.push(std::move(arg));
    }
    e.set("args", std::move(args));
    launches.push(std::move(e));
  }
  root.set("launches", std::move(launches));
  if (!p.size_checks.empty()) {  // np-views: the index checks (absent when there are none)
    Json checks = Json::array();
    for (const ir::SizeCheck& c : p.size_checks) {
      Json e = Json::object();
      e.set("size", c.size.str());
      e.set("at_least", c.at_least);
      e.set("what", c.what);
      e.set("file", c.loc.file);
      e.set("line", c.loc.line);
      e.set("col", c.loc.col);
      checks.push(std::move(e));
    }
    root.set("size_checks", std::move(checks));
  }
  if (p.plan.error_scratch >= 0) {  // issue 16: the error record and its checks (absent when none)
    root.set("error_scratch", p.plan.error_scratch);
    Json checks = Json::array();
    for (const ir::IndexCheck& c : p.index_checks) {
      Json e = Json::object();
      e.set("op", std::string(ir::op_kind_name(c.op)));
      e.set("axis", c.axis);
      e.set("size", c.size.str());
      e.set("file", c.loc.file);
      e.set("line", c.loc.line);
      e.set("col", c.loc.col);
      e.set("kernel", c.kernel);
      e.set("node", c.node);
      checks.push(std::move(e));
    }
    root.set("index_checks", std::move(checks));
  }
  return root.dump();
}

void write_bundle(const std::string& dir, const CudaProgram& p) {
  validate(p, "cannot write bundle '" + dir + "'");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create bundle directory '" + dir + "': " + ec.message());
  std::string ptx = p.ptx;
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();  // a text file, as ptxas wants it
  write_file(fs::path(dir) / "kernels.ptx", ptx);
  for (size_t i = 0; i < p.plan.constants.size(); ++i)
    write_npy((fs::path(dir) / constant_file(i)).string(), p.plan.constants[i]);
  write_file(fs::path(dir) / "plan.json", bundle_plan_json(p));
}

CudaProgram read_bundle(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("bundle '" + dir + "' is not a directory");
  return parse_bundle([&](const std::string& name) { return read_file(fs::path(dir) / name); }, dir);
}

CudaProgram parse_bundle(const BundleFiles& files, const std::string& dir) {
  std::string what = (fs::path(dir) / "plan.json").string();
  Json root = Json::parse(required_file(files, "plan.json", dir), what);
  CudaProgram p;
  try {
    if (root.kind() != Json::Kind::Object || !root.has("format") ||
        root.at("format", "plan").as_string("format") != kFormatName)
      throw Error("not a fuse CUDA bundle plan (\"format\" must be \"" + std::string(kFormatName) + "\")");
    int64_t version = root.at("version", "plan").as_int("version");
    if (version != kBundleFormatVersion)
      throw Error("format version " + std::to_string(version) + ", but this fuse reads version " +
                  std::to_string(kBundleFormatVersion) + " (rebuild the bundle with a matching fusec)");
    p.plan.sm = root.at("sm", "plan").as_string("sm");
    for (const Json& s : root.at("symbols", "plan").items("symbols")) p.plan.symbols.push_back(s.as_string("symbols[]"));
    const std::vector<Json>& buffers = root.at("buffers", "plan").items("buffers");
    for (size_t i = 0; i < buffers.size(); ++i) p.buffers.push_back(buffer_at(buffers[i], "buffers[" + std::to_string(i) + "]"));
    p.inputs = io_at(root.at("inputs", "plan"), "inputs");
    p.outputs = io_at(root.at("outputs", "plan"), "outputs");
    p.num_slots = to_int(root.at("num_slots", "plan").as_int("num_slots"), "num_slots");
    for (const Json& s : root.at("scratch_bytes", "plan").items("scratch_bytes"))
      p.plan.scratch_bytes.push_back(s.as_int("scratch_bytes[]"));
    const std::vector<Json>& launches = root.at("launches", "plan").items("launches");
    for (size_t i = 0; i < launches.size(); ++i)
      p.plan.launches.push_back(launch_at(launches[i], "launches[" + std::to_string(i) + "]"));
    if (root.has("size_checks")) {
      const std::vector<Json>& checks = root.at("size_checks", "plan").items("size_checks");
      for (size_t i = 0; i < checks.size(); ++i) {
        std::string at = "size_checks[" + std::to_string(i) + "]";
        ir::SizeCheck c;
        c.size = ir::parse_dim(checks[i].at("size", at).as_string(at + ".size"));
        c.at_least = checks[i].at("at_least", at).as_int(at + ".at_least");
        c.what = checks[i].at("what", at).as_string(at + ".what");
        c.loc.file = checks[i].at("file", at).as_string(at + ".file");
        c.loc.line = to_int(checks[i].at("line", at).as_int(at + ".line"), at + ".line");
        c.loc.col = to_int(checks[i].at("col", at).as_int(at + ".col"), at + ".col");
        p.size_checks.push_back(std::move(c));
      }
    }
    if (root.has("error_scratch")) {
      p.plan.error_scratch = to_int(root.at("error_scratch", "plan").as_int("error_scratch"), "error_scratch");
      const std::vector<Json>& checks = root.at("index_checks", "plan").items("index_checks");
      for (size_t i = 0; i < checks.size(); ++i) {
        std::string at = "index_checks[" + std::to_string(i) + "]";
        ir::IndexCheck c;
        std::string op = checks[i].at("op", at).as_string(at + ".op");
        bool known = false;
        for (ir::OpKind k : {ir::OpKind::Take, ir::OpKind::TakeAlongAxis, ir::OpKind::IndexAdd, ir::OpKind::Bincount})
          if (op == ir::op_kind_name(k)) c.op = k, known = true;
        if (!known) throw Error(at + ".op: '" + op + "' is not an op with index checks");
        c.axis = to_int(checks[i].at("axis", at).as_int(at + ".axis"), at + ".axis");
        c.size = ir::parse_dim(checks[i].at("size", at).as_string(at + ".size"));
        c.loc.file = checks[i].at("file", at).as_string(at + ".file");
        c.loc.line = to_int(checks[i].at("line", at).as_int(at + ".line"), at + ".line");
        c.loc.col = to_int(checks[i].at("col", at).as_int(at + ".col"), at + ".col");
        c.kernel = to_int(checks[i].at("kernel", at).as_int(at + ".kernel"), at + ".kernel");
        c.node = to_int(checks[i].at("node", at).as_int(at + ".node"), at + ".node");
        p.index_checks.push_back(std::move(c));
      }
    }
    const std::vector<Json>& constants = root.at("constants", "plan").items("constants");
    for (size_t i = 0; i < constants.size(); ++i) {
      const std::string& file = constants[i].as_string("constants[" + std::to_string(i) + "]");
      // A NUL would end the path early: "x.npy\u0000" would name x.npy.
      if (file.empty() || file.find_first_of(std::string("/\0", 2)) != std::string::npos || file == "." ||
          file == "..")
        throw Error("constants[" + std::to_string(i) + "]: '" + file + "' is not a file name in the bundle");
      std::optional<std::string> bytes = files(file);
      if (!bytes) throw Error("constant file " + file + " is missing from the bundle");
      p.plan.constants.push_back(parse_npy(*bytes, (fs::path(dir) / file).string()));
    }
  } catch (const Error& e) {
    if (e.message().rfind(what, 0) == 0) throw;
    throw Error(what + ": " + e.message());
  }
  p.ptx = required_file(files, "kernels.ptx", dir);
  validate(p, what);
  return p;
}

}  // namespace fuse::runtime
