// The tunetable::gemm operator's CUDA kernel in C++: the hot path of torch tensors without Python.
//
// kernels/runtime/torch_ext.py builds this file on the first import of tunetable.torch (cached) and loads it with
// torch.ops.load_library; torch_ops.py keeps the schema, the fake kernel and the Python implementations.
//
// The CUDA kernel looks each call up in a cache that the Python implementation fills: per route (device, the
// caller's current stream, M, N, K) either "torch" (at::mm, as the Python route does) or a kernel launch
// (function, grid, block, shared memory, the device's context, the argument layout) with one encoded argument
// set per (A, B) address pair. A hit allocates the output (at::empty's CUDA kernel) on the operands' device,
// writes C's address into its slot of a copy of the set and calls cuLaunchKernel on torch's current stream of
// that device. Anything else (a new shape, stream or (A, B) pair, an input the cache cannot answer for, the
// cache turned off while shapes are recorded) goes to tunetable::_gemm_python, which runs the Python path
// (every check and error) and registers what it prepared for the next call.
//
// The Autograd kernel (the Python one cost a Python call per call outside inference_mode) sends a call that
// wants a gradient to tunetable::_gemm_requires_grad (a Function whose backward raises the inference-only
// error) and every other call straight below autograd.
//
// libcuda is opened with dlopen and torch's current stream is read through c10's device-guard interface, so the
// build needs torch's headers and libraries only: no CUDA toolkit headers, no link against the driver.

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/EmptyTensor.h>
#include <ATen/ops/mm.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

// The driver calls used, as libcuda declares them (cuda.h), resolved once with dlsym.
using CUresult = int;
using CUcontext = void*;
using CUfunction = void*;
using CUstream = void*;
using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void**, void**);
using CtxGetCurrentFn = CUresult (*)(CUcontext*);
using CtxPushFn = CUresult (*)(CUcontext);
using CtxPopFn = CUresult (*)(CUcontext*);

struct Driver {
  LaunchKernelFn launch = nullptr;
  CtxGetCurrentFn current = nullptr;
  CtxPushFn push = nullptr;
  CtxPopFn pop = nullptr;
};

const Driver& driver() {
  static const Driver found = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    TORCH_CHECK(lib != nullptr, "tunetable::gemm: cannot open libcuda.so.1: ", dlerror());
    Driver d;
    d.launch = reinterpret_cast<LaunchKernelFn>(dlsym(lib, "cuLaunchKernel"));
    d.current = reinterpret_cast<CtxGetCurrentFn>(dlsym(lib, "cuCtxGetCurrent"));
    d.push = reinterpret_cast<CtxPushFn>(dlsym(lib, "cuCtxPushCurrent_v2"));
    d.pop = reinterpret_cast<CtxPopFn>(dlsym(lib, "cuCtxPopCurrent_v2"));
    TORCH_CHECK(d.launch && d.current && d.push && d.pop, "tunetable::gemm: libcuda.so.1 lacks a driver call");
    return d;
  }();
  return found;
}

// Limits of one argument set (the largest family's is a few hundred bytes: two 128-byte tensor maps and scalars)
// and of the sets kept per route (as kernels/runtime/prepared.py's PREPARED_SETS).
constexpr size_t kMaxBlob = 1024;
constexpr size_t kMaxArguments = 64;
constexpr size_t kMaxSets = 1024;

struct RouteKey {
  int64_t device, stream, m, n, k;
  bool operator==(const RouteKey& other) const {
    return device == other.device && stream == other.stream && m == other.m && n == other.n && k == other.k;
  }
};

struct PairKey {
  int64_t a, b;
  bool operator==(const PairKey& other) const { return a == other.a && b == other.b; }
};

inline size_t mix(size_t seed, int64_t value) {
  return seed ^ (std::hash<int64_t>()(value) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

struct RouteHash {
  size_t operator()(const RouteKey& key) const {
    return mix(mix(mix(mix(mix(0, key.device), key.stream), key.m), key.n), key.k);
  }
};

struct PairHash {
  size_t operator()(const PairKey& key) const { return mix(mix(0, key.a), key.b); }
};

struct Route {
  bool torch = false;                          // at::mm serves the shape (the Python route's choice)
  CUfunction function = nullptr;
  std::array<unsigned, 7> geometry{};          // grid x, y, z, block x, y, z, dynamic shared memory bytes
  CUcontext context = nullptr;                 // the device's primary context (the plan's)
  std::vector<uint32_t> offsets;               // each argument's offset in an argument set
  int64_t c_slot = -1;                         // the argument that is C's address
  size_t size = 0;                             // bytes of one argument set
  std::unordered_map<PairKey, std::vector<uint8_t>, PairHash> sets;
  std::deque<PairKey> order;                   // oldest first, for dropping beyond kMaxSets

  bool same_launch(const Route& other) const {
    return torch == other.torch && function == other.function && geometry == other.geometry &&
           context == other.context && offsets == other.offsets && c_slot == other.c_slot && size == other.size;
  }
};

std::mutex g_lock;
std::unordered_map<RouteKey, Route, RouteHash> g_routes;
std::atomic<bool> g_enabled{true};
std::atomic<int64_t> g_hits{0};
std::atomic<int64_t> g_fallbacks{0};

// One call as the cache answers it: a miss, torch's matmul, or a launch with its argument set copied out.
struct Answer {
  enum Kind { kMiss = 0, kTorch = 1, kKernel = 2 } kind = kMiss;
  CUfunction function = nullptr;
  std::array<unsigned, 7> geometry{};
  CUcontext context = nullptr;
  size_t count = 0;                               // arguments
  size_t size = 0;                                // bytes of the argument set
  std::array<uint32_t, kMaxArguments> offsets;   // left uninitialised: only the first `count` are read
  uint32_t c_offset = 0;
  alignas(64) std::array<uint8_t, kMaxBlob> blob;  // left uninitialised: only an argument set's bytes are read
};

void look_up(const RouteKey& key, const PairKey& pair, Answer& answer) {
  std::lock_guard<std::mutex> guard(g_lock);
  auto route = g_routes.find(key);
  if (route == g_routes.end()) {
    return;
  }
  const Route& found = route->second;
  if (found.torch) {
    answer.kind = Answer::kTorch;
    return;
  }
  auto set = found.sets.find(pair);
  if (set == found.sets.end()) {
    return;
  }
  answer.kind = Answer::kKernel;
  answer.function = found.function;
  answer.geometry = found.geometry;
  answer.context = found.context;
  answer.count = found.offsets.size();
  answer.size = found.size;
  std::copy(found.offsets.begin(), found.offsets.end(), answer.offsets.begin());
  answer.c_offset = found.offsets[static_cast<size_t>(found.c_slot)];
  std::memcpy(answer.blob.data(), set->second.data(), found.size);
}

at::Tensor python_gemm(const at::Tensor& a, const at::Tensor& b) {
  // The Python implementation, on the CUDA key this call came in on (its checks, errors and routes).
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("tunetable::_gemm_python", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  g_fallbacks.fetch_add(1, std::memory_order_relaxed);
  return op.redispatch(c10::DispatchKeySet(c10::DispatchKey::CUDA), a, b);
}

void launch(Answer& answer, uint64_t c_ptr, CUstream stream) {
  // The argument set with C's address written into its slot, launched in the plan's context.
  std::memcpy(answer.blob.data() + answer.c_offset, &c_ptr, sizeof(c_ptr));
  std::array<void*, kMaxArguments> params;
  for (size_t index = 0; index < answer.count; ++index) {
    params[index] = answer.blob.data() + answer.offsets[index];
  }
  const Driver& cu = driver();
  CUcontext current = nullptr;
  CUresult status = cu.current(&current);
  TORCH_CHECK(status == 0, "cuCtxGetCurrent failed with CUresult ", status);
  const auto& g = answer.geometry;
  if (current == answer.context) {
    status = cu.launch(answer.function, g[0], g[1], g[2], g[3], g[4], g[5], g[6], stream, params.data(), nullptr);
  } else {
    // The kernel and the stream belong to the operands' device: its context, pushed for the launch only.
    CUresult pushed = cu.push(answer.context);
    TORCH_CHECK(pushed == 0, "cuCtxPushCurrent failed with CUresult ", pushed);
    status = cu.launch(answer.function, g[0], g[1], g[2], g[3], g[4], g[5], g[6], stream, params.data(), nullptr);
    CUcontext popped = nullptr;
    cu.pop(&popped);
  }
  TORCH_CHECK(status == 0, "cuLaunchKernel failed with CUresult ", status);
}

CUstream current_stream(int64_t device) {
  // torch's current stream of the device as a CUstream (c10::cuda::getCurrentCUDAStream(device).stream()).
  static const c10::impl::DeviceGuardImplInterface* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  const c10::Stream found = cuda->getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
  return static_cast<CUstream>(cuda->getStreamNativeHandle(found));
}

at::Tensor fast_gemm(const at::Tensor& a, const at::Tensor& b) {
  // What the Python fast path checks per call (kernels/runtime/launch.py _torch_fast), then the cache.
  if (!g_enabled.load(std::memory_order_relaxed) || a.dim() != 2 || b.dim() != 2 ||
      a.scalar_type() != at::kBFloat16 || b.scalar_type() != at::kBFloat16 || !a.is_cuda() || !b.is_cuda() ||
      !a.is_contiguous() || !b.is_contiguous()) {
    return python_gemm(a, b);
  }
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  const int64_t device = a.get_device();
  const auto a_ptr = reinterpret_cast<uintptr_t>(a.const_data_ptr());
  const auto b_ptr = reinterpret_cast<uintptr_t>(b.const_data_ptr());
  if (b.size(1) != k || b.get_device() != device || ((a_ptr | b_ptr) % 16) != 0) {
    return python_gemm(a, b);
  }
  CUstream stream = current_stream(device);
  Answer answer;
  look_up(RouteKey{device, reinterpret_cast<int64_t>(stream), m, n, k},
          PairKey{static_cast<int64_t>(a_ptr), static_cast<int64_t>(b_ptr)}, answer);
  if (answer.kind == Answer::kMiss) {
    return python_gemm(a, b);
  }
  g_hits.fetch_add(1, std::memory_order_relaxed);
  if (answer.kind == Answer::kTorch) {
    return at::mm(a, b.t());
  }
  // at::empty's CUDA kernel without its two dispatches: the operands' device, a graph's pool during capture.
  at::Tensor out(at::detail::empty_cuda({m, n}, at::kBFloat16, a.device(), std::nullopt));
  launch(answer, reinterpret_cast<uint64_t>(out.data_ptr()), stream);
  return out;
}

at::Tensor autograd_gemm(c10::DispatchKeySet keys, const at::Tensor& a, const at::Tensor& b) {
  // The Autograd kernel: where a gradient is wanted, the Python one (a Function whose backward raises the
  // inference-only error); else straight below autograd (the CUDA kernel above, or a tracing mode's key).
  if (c10::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad())) {
    static const auto wanted = c10::Dispatcher::singleton()
                                   .findSchemaOrThrow("tunetable::_gemm_requires_grad", "")
                                   .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
    return wanted.call(a, b);
  }
  static const auto gemm = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("tunetable::gemm", "")
                               .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  at::AutoDispatchBelowADInplaceOrView below;
  return gemm.redispatch(keys & c10::after_ADInplaceOrView_keyset, a, b);
}

// --- the cache, filled from Python (kernels/runtime/torch_ops.py) --------------------------------------------

void register_torch(int64_t device, int64_t stream, int64_t m, int64_t n, int64_t k) {
  // torch's matmul serves (device, stream, M, N, K): the Python route's choice.
  Route route;
  route.torch = true;
  std::lock_guard<std::mutex> guard(g_lock);
  g_routes[RouteKey{device, stream, m, n, k}] = std::move(route);
}

void register_kernel(int64_t device, int64_t stream, int64_t m, int64_t n, int64_t k, int64_t function,
                     c10::IntArrayRef geometry, int64_t context, c10::IntArrayRef offsets, int64_t c_slot,
                     int64_t a_ptr, int64_t b_ptr, const at::Tensor& blob) {
  // A launch of (device, stream, M, N, K) (kept with its sets when it is the one already held) and its argument
  // set for (A, B): each argument at its offset in `blob`, C's address written into argument `c_slot` per call.
  TORCH_CHECK(blob.device().is_cpu() && blob.scalar_type() == at::kByte && blob.dim() == 1 && blob.is_contiguous(),
              "tunetable::_fast_kernel: the argument set is a contiguous 1-D CPU uint8 tensor");
  const int64_t size = blob.numel();
  TORCH_CHECK(function != 0, "tunetable::_fast_kernel: no function");
  TORCH_CHECK(geometry.size() == 7, "tunetable::_fast_kernel: geometry is grid (3), block (3), shared memory (1)");
  TORCH_CHECK(size > 0 && static_cast<size_t>(size) <= kMaxBlob, "tunetable::_fast_kernel: an argument set of ",
              size, " bytes (1 to ", kMaxBlob, ")");
  TORCH_CHECK(!offsets.empty() && offsets.size() <= kMaxArguments, "tunetable::_fast_kernel: ", offsets.size(),
              " arguments (1 to ", kMaxArguments, ")");
  TORCH_CHECK(c_slot >= 0 && static_cast<size_t>(c_slot) < offsets.size(), "tunetable::_fast_kernel: C's slot ",
              c_slot, " is not an argument");
  Route route;
  for (size_t index = 0; index < 7; ++index) {
    TORCH_CHECK(geometry[index] >= 0 && geometry[index] <= UINT32_MAX, "tunetable::_fast_kernel: geometry[", index,
                "] = ", geometry[index]);
    route.geometry[index] = static_cast<unsigned>(geometry[index]);
  }
  for (int64_t offset : offsets) {
    TORCH_CHECK(offset >= 0 && offset < size, "tunetable::_fast_kernel: offset ", offset, " outside ", size,
                " bytes");
    route.offsets.push_back(static_cast<uint32_t>(offset));
  }
  TORCH_CHECK(offsets[c_slot] + 8 <= size, "tunetable::_fast_kernel: C's slot does not hold 8 bytes");
  route.function = reinterpret_cast<CUfunction>(function);
  route.context = reinterpret_cast<CUcontext>(context);
  route.c_slot = c_slot;
  route.size = static_cast<size_t>(size);

  std::lock_guard<std::mutex> guard(g_lock);
  const RouteKey key{device, stream, m, n, k};
  auto found = g_routes.find(key);
  if (found == g_routes.end() || !found->second.same_launch(route)) {
    found = g_routes.insert_or_assign(key, std::move(route)).first;   // a new launch: the old sets go with it
  }
  Route& held = found->second;
  const PairKey pair{a_ptr, b_ptr};
  const auto* data = blob.const_data_ptr<uint8_t>();
  auto set = held.sets.find(pair);
  if (set != held.sets.end()) {
    set->second.assign(data, data + held.size);
    return;
  }
  if (held.sets.size() >= kMaxSets) {
    held.sets.erase(held.order.front());
    held.order.pop_front();
  }
  held.sets.emplace(pair, std::vector<uint8_t>(data, data + held.size));
  held.order.push_back(pair);
}

void clear_routes() {
  std::lock_guard<std::mutex> guard(g_lock);
  g_routes.clear();
}

void enable(bool on) { g_enabled.store(on); }

std::vector<int64_t> stats() {
  // [enabled, hits, fallbacks, routes, argument sets]
  std::lock_guard<std::mutex> guard(g_lock);
  int64_t sets = 0;
  for (const auto& item : g_routes) {
    sets += static_cast<int64_t>(item.second.sets.size());
  }
  return {g_enabled.load() ? 1 : 0, g_hits.load(), g_fallbacks.load(), static_cast<int64_t>(g_routes.size()), sets};
}

std::vector<int64_t> lookup(int64_t device, int64_t stream, int64_t m, int64_t n, int64_t k, int64_t a_ptr,
                            int64_t b_ptr, int64_t c_ptr) {
  // What a call would launch, without launching (tests): [kind] for a miss (0) or torch's matmul (1); for a
  // kernel (2): [2, arguments, set size, each argument's offset..., the set's bytes with C written...].
  Answer answer;
  look_up(RouteKey{device, stream, m, n, k}, PairKey{a_ptr, b_ptr}, answer);
  std::vector<int64_t> found{static_cast<int64_t>(answer.kind)};
  if (answer.kind != Answer::kKernel) {
    return found;
  }
  const auto c = static_cast<uint64_t>(c_ptr);
  std::memcpy(answer.blob.data() + answer.c_offset, &c, sizeof(c));
  found.push_back(static_cast<int64_t>(answer.count));
  found.push_back(static_cast<int64_t>(answer.size));
  for (size_t index = 0; index < answer.count; ++index) {
    found.push_back(answer.offsets[index]);
  }
  for (size_t index = 0; index < answer.size; ++index) {
    found.push_back(answer.blob[index]);
  }
  return found;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tunetable, m) {
  m.def("_fast_torch(int device, int stream, int m, int n, int k) -> ()", &register_torch);
  m.def("_fast_kernel(int device, int stream, int m, int n, int k, int function, int[] geometry, int context, "
        "int[] offsets, int c_slot, int a_ptr, int b_ptr, Tensor blob) -> ()",
        &register_kernel);
  m.def("_fast_clear() -> ()", &clear_routes);
  m.def("_fast_enable(bool on) -> ()", &enable);
  m.def("_fast_stats() -> int[]", &stats);
  m.def("_fast_lookup(int device, int stream, int m, int n, int k, int a_ptr, int b_ptr, int c_ptr) -> int[]",
        &lookup);
}

TORCH_LIBRARY_IMPL(tunetable, CUDA, m) {
  m.impl("gemm", &fast_gemm);
}

TORCH_LIBRARY_IMPL(tunetable, Autograd, m) {
  m.impl("gemm", &autograd_gemm);
}
