// fuse-run: runs an AOT bundle (runtime/bundle.h) on a GPU. Links only the runtime and the IR:
// no MLIR, no LLVM, so it deploys to GPU machines without the compiler.
//
//   fuse-run DIR --input NAME=FILE.npy ... [--out OUTDIR] [--expect DIR [--tolerance T]]
//            [--bench N] [--device N]
//
// Each output is written to OUTDIR/NAME.npy (without --out or --expect, printed as NumPy would).
// --expect compares each output with DIR/NAME.npy (e.g. the reference interpreter's, from
// `fusec run --target=interp --out DIR`) and exits 1 on a mismatch. --bench N runs N more times
// and prints the median time of the kernels, measured with CUDA events.
// Inputs are read and checked against the bundle before CUDA is touched, so mistakes in them are
// reported on any machine. Exit status: 0 on success, 1 for errors in the bundle, inputs or flags
// and when CUDA is unavailable, 2 for internal errors.
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "ir/error.h"
#include "runtime/bundle.h"
#include "runtime/compare.h"
#include "runtime/cuda_executable.h"
#include "runtime/npy.h"

namespace fuse {
namespace {

using ir::Error;

constexpr const char* kUsage =
    "usage: fuse-run DIR --input NAME=FILE.npy ... [--out OUTDIR] [--expect DIR [--tolerance T]] [--bench N]\n"
    "                [--device N]\n"
    "Runs a bundle on an NVIDIA GPU through the CUDA driver (libcuda.so.1); needs no MLIR or LLVM.\n"
    "  DIR            a bundle written by fusec --target=cuda --emit=bundle\n"
    "  --input N=F    the value of input N, a .npy file (one per input of the bundle)\n"
    "  --out OUTDIR   write each output to OUTDIR/NAME.npy (else print them)\n"
    "  --expect DIR   compare each output with DIR/NAME.npy; exit 1 on a mismatch\n"
    "  --tolerance T  with --expect: floats within T relative + T absolute (default 1e-5)\n"
    "                 instead of DIR/NAME.bound.npy (the rounding model's bounds) when that exists\n"
    "  --bench N      run N more times and print the median kernel time\n"
    "  --device N     the GPU to run on (default 0)\n";

struct Options {
  std::string bundle;
  std::map<std::string, std::string> inputs;  // name -> .npy path
  std::string out;
  std::string expect;
  double tolerance = 1e-5;
  bool tolerance_given = false;
  int bench = 0;
  int device = 0;
};

int parse_count(const std::string& text, const std::string& flag, int min) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min)
    throw Error(flag + " wants an integer >= " + std::to_string(min) + ", not '" + text + "'");
  return v;
}

Options parse_options(const std::vector<std::string>& argv) {
  Options o;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= argv.size()) throw Error(a + " needs a value\n" + kUsage);
      return argv[++i];
    };
    if (a == "--input") {
      const std::string& v = value();
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
        throw Error("--input wants NAME=FILE.npy, not '" + v + "'");
      std::string name = v.substr(0, eq);
      if (o.inputs.count(name)) throw Error("input '" + name + "' is given twice");
      o.inputs[name] = v.substr(eq + 1);
    } else if (a == "--out") {
      o.out = value();
    } else if (a == "--expect") {
      o.expect = value();
    } else if (a == "--tolerance") {
      const std::string& v = value();
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), o.tolerance);
      if (ec != std::errc() || end != v.data() + v.size() || !(o.tolerance >= 0))
        throw Error("--tolerance wants a number >= 0, not '" + v + "'");
      o.tolerance_given = true;
    } else if (a == "--bench") {
      o.bench = parse_count(value(), "--bench", 1);
    } else if (a == "--device") {
      o.device = parse_count(value(), "--device", 0);
    } else if (a.rfind("-", 0) == 0) {
      throw Error("unknown option '" + a + "'\n" + kUsage);
    } else if (o.bundle.empty()) {
      o.bundle = a;
    } else {
      throw Error("more than one bundle given ('" + o.bundle + "' and '" + a + "')");
    }
  }
  if (o.bundle.empty()) throw Error(std::string("no bundle given\n") + kUsage);
  if (o.tolerance_given && o.expect.empty()) throw Error("--tolerance applies only with --expect");
  return o;
}

int fuse_run(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    (argv.empty() ? std::cerr : std::cout) << kUsage;
    return argv.empty() ? 1 : 0;
  }
  Options o = parse_options(argv);
  runtime::CudaProgram program = runtime::read_bundle(o.bundle);

  ir::TensorMap inputs;
  std::map<std::string, runtime::TensorType> types;
  for (const auto& [name, path] : o.inputs) {
    inputs[name] = runtime::read_npy(path);
    types[name] = {inputs[name].dtype, inputs[name].shape};
  }
  runtime::bind_cuda_inputs(program, types);  // every mistake in the inputs, before CUDA

  if (!runtime::cuda::cuda_available()) throw runtime::cuda::Unavailable(runtime::cuda::cuda_unavailable_reason());
  runtime::CudaExecutable exe(std::move(program), o.device);
  runtime::DeviceTensorMap device_inputs;
  for (const auto& [name, array] : inputs) device_inputs[name] = runtime::DeviceBuffer::to_device(array, o.device);
  runtime::DeviceTensorMap outputs;
  exe.run(device_inputs, outputs);
  if (o.bench > 0) {
    std::vector<float> ms;
    for (int i = 0; i < o.bench; ++i) {
      exe.run(device_inputs, outputs);
      ms.push_back(exe.last_run_ms());
    }
    std::sort(ms.begin(), ms.end());
    float median = ms.size() % 2 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
    std::cout << "median kernel time over " << o.bench << " runs: " << median << " ms (min " << ms.front()
              << " ms, max " << ms.back() << " ms)\n";
  }
  exe.synchronize();

  if (!o.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    if (ec) throw Error("cannot create directory '" + o.out + "': " + ec.message());
  }
  // In the bundle's output order.
  int status = 0;
  for (const ir::ProgramIO& out : exe.program().outputs) {
    ir::HostArray value = outputs.at(out.name).to_host();
    if (!o.out.empty()) runtime::write_npy((std::filesystem::path(o.out) / (out.name + ".npy")).string(), value);
    else if (o.bench == 0 && o.expect.empty()) std::cout << runtime::array_repr(value, out.name + " = ") << "\n";
    if (!o.expect.empty()) {
      ir::HostArray expected = runtime::read_npy((std::filesystem::path(o.expect) / (out.name + ".npy")).string());
      // The rounding model's per-element bounds (fuse_gpu_kit writes them): a fixed tolerance is
      // too tight for f32 matmuls with a long K and too loose for short ones.
      std::filesystem::path bound = std::filesystem::path(o.expect) / (out.name + ".bound.npy");
      std::string what = "output '" + out.name + "'";
      std::string mismatch =
          !o.tolerance_given && std::filesystem::exists(bound)
              ? runtime::compare_arrays(expected, value, runtime::read_npy(bound.string()), what)
              : runtime::compare_arrays(expected, value, o.tolerance, o.tolerance, what);
      if (mismatch.empty()) {
        std::cout << "output '" << out.name << "': matches (max abs difference "
                  << runtime::max_abs_difference(expected, value) << ")\n";
      } else {
        std::cout << "MISMATCH: " << mismatch << "\n";
        status = 1;
      }
    }
  }
  return status;
}

}  // namespace
}  // namespace fuse

int main(int argc, char** argv) {
  try {
    return fuse::fuse_run(std::vector<std::string>(argv + 1, argv + argc));
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
