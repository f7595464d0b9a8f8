// A small CUDA program written by hand (PTX for sm_80 and its launch plan) for the runtime's
// tests: y = (a + b) * s, through an intermediate t = a + b held in a memory-plan slot.
// The fake driver (tests/fake_cuda) executes these entries on the host; a real GPU runs the PTX.
#pragma once

#include "runtime/cuda_executable.h"

namespace fuse_test {

inline const char* kVaddScalePtx = R"(//
// vadd_f32(a, b, c, n): c[i] = a[i] + b[i];  scale_f32(x, s, y, n): y[i] = x[i] * s[0]
// One thread per element, i = blockIdx.x * blockDim.x + threadIdx.x, guarded by i < n.
.version 7.0
.target sm_80
.address_size 64

.visible .entry vadd_f32(
	.param .u64 vadd_f32_param_0,
	.param .u64 vadd_f32_param_1,
	.param .u64 vadd_f32_param_2,
	.param .u64 vadd_f32_param_3
)
{
	.reg .pred %p<2>;
	.reg .f32 %f<4>;
	.reg .b32 %r<4>;
	.reg .b64 %rd<11>;

	ld.param.u64 %rd1, [vadd_f32_param_0];
	ld.param.u64 %rd2, [vadd_f32_param_1];
	ld.param.u64 %rd3, [vadd_f32_param_2];
	ld.param.u64 %rd4, [vadd_f32_param_3];
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %ntid.x;
	mov.u32 %r3, %tid.x;
	mul.wide.u32 %rd5, %r1, %r2;
	cvt.u64.u32 %rd6, %r3;
	add.s64 %rd5, %rd5, %rd6;
	setp.ge.s64 %p1, %rd5, %rd4;
	@%p1 bra VADD_DONE;
	cvta.to.global.u64 %rd7, %rd1;
	cvta.to.global.u64 %rd8, %rd2;
	cvta.to.global.u64 %rd9, %rd3;
	shl.b64 %rd10, %rd5, 2;
	add.s64 %rd7, %rd7, %rd10;
	add.s64 %rd8, %rd8, %rd10;
	add.s64 %rd9, %rd9, %rd10;
	ld.global.f32 %f1, [%rd7];
	ld.global.f32 %f2, [%rd8];
	add.f32 %f3, %f1, %f2;
	st.global.f32 [%rd9], %f3;
VADD_DONE:
	ret;
}

.visible .entry scale_f32(
	.param .u64 scale_f32_param_0,
	.param .u64 scale_f32_param_1,
	.param .u64 scale_f32_param_2,
	.param .u64 scale_f32_param_3
)
{
	.reg .pred %p<2>;
	.reg .f32 %f<4>;
	.reg .b32 %r<4>;
	.reg .b64 %rd<11>;

	ld.param.u64 %rd1, [scale_f32_param_0];
	ld.param.u64 %rd2, [scale_f32_param_1];
	ld.param.u64 %rd3, [scale_f32_param_2];
	ld.param.u64 %rd4, [scale_f32_param_3];
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %ntid.x;
	mov.u32 %r3, %tid.x;
	mul.wide.u32 %rd5, %r1, %r2;
	cvt.u64.u32 %rd6, %r3;
	add.s64 %rd5, %rd5, %rd6;
	setp.ge.s64 %p1, %rd5, %rd4;
	@%p1 bra SCALE_DONE;
	cvta.to.global.u64 %rd7, %rd1;
	cvta.to.global.u64 %rd8, %rd2;
	cvta.to.global.u64 %rd9, %rd3;
	shl.b64 %rd10, %rd5, 2;
	add.s64 %rd7, %rd7, %rd10;
	add.s64 %rd9, %rd9, %rd10;
	ld.global.f32 %f1, [%rd7];
	ld.global.f32 %f2, [%rd8];
	mul.f32 %f3, %f1, %f2;
	st.global.f32 [%rd9], %f3;
SCALE_DONE:
	ret;
}
)";

/// The same two entries at the NVVM level (LLVM IR as convert-gpu-to-nvvm leaves it), for the
/// CUDA simulator (codegen::compile_cuda_sim_ir makes the module image that replaces the PTX).
inline const char* kVaddScaleNvvm = R"(
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
define i64 @global_index() {
  %b = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %n = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bn = mul i32 %b, %n
  %i = add i32 %bn, %t
  %w = zext i32 %i to i64
  ret i64 %w
}
define void @vadd_f32(ptr %a, ptr %b, ptr %c, i64 %n) {
  %i = call i64 @global_index()
  %in = icmp slt i64 %i, %n
  br i1 %in, label %body, label %done
body:
  %pa = getelementptr float, ptr %a, i64 %i
  %pb = getelementptr float, ptr %b, i64 %i
  %pc = getelementptr float, ptr %c, i64 %i
  %x = load float, ptr %pa, align 4
  %y = load float, ptr %pb, align 4
  %s = fadd float %x, %y
  store float %s, ptr %pc, align 4
  br label %done
done:
  ret void
}
define void @scale_f32(ptr %x, ptr %s, ptr %y, i64 %n) {
  %i = call i64 @global_index()
  %in = icmp slt i64 %i, %n
  br i1 %in, label %body, label %done
body:
  %px = getelementptr float, ptr %x, i64 %i
  %py = getelementptr float, ptr %y, i64 %i
  %v = load float, ptr %px, align 4
  %k = load float, ptr %s, align 4
  %r = fmul float %v, %k
  store float %r, ptr %py, align 4
  br label %done
done:
  ret void
}
)";

/// Buffers: 0 a: f32[N] (input), 1 b: f32[N] (input), 2 t: f32[N] (slot 0), 3 y: f32[N] (output).
/// Launches: vadd_f32(a, b, t, N) then scale_f32(t, constant 0 = [scale], y, N), 256 threads per
/// block, one element per thread.
inline fuse::runtime::CudaProgram vadd_scale_program(float scale) {
  using namespace fuse;
  runtime::CudaProgram p;
  ir::Shape n{ir::Dim::symbol("N")};
  p.buffers = {{"a", ir::DType::F32, n, ir::BufferRole::Input, -1},
               {"b", ir::DType::F32, n, ir::BufferRole::Input, -1},
               {"t", ir::DType::F32, n, ir::BufferRole::Intermediate, 0},
               {"y", ir::DType::F32, n, ir::BufferRole::Output, -1}};
  p.inputs = {{"a", 0}, {"b", 1}};
  p.outputs = {{"y", 3}};
  p.num_slots = 1;
  p.plan.sm = "sm_80";
  p.plan.symbols = {"N"};
  p.plan.constants = {ir::HostArray::from<float>({1}, {scale})};
  using K = ir::CudaArg::Kind;
  ir::CudaLaunch add;
  add.entry = "vadd_f32";
  add.kernel = 0;
  add.block = {256, 1, 1};
  add.work = {ir::Dim::symbol("N"), 1, 1};
  add.work_per_block = {256, 1, 1};
  add.args = {{K::Buffer, 0}, {K::Buffer, 1}, {K::Buffer, 2}, {K::Symbol, 0}};
  ir::CudaLaunch mul = add;
  mul.entry = "scale_f32";
  mul.kernel = 1;
  mul.args = {{K::Buffer, 2}, {K::Constant, 0}, {K::Buffer, 3}, {K::Symbol, 0}};
  p.plan.launches = {add, mul};
  p.ptx = kVaddScalePtx;
  return p;
}

}  // namespace fuse_test
