// What CUDA's math does to the numbers cuRAND's Philox transforms feed it (docs/cuda-simulation.md,
// "Random numbers"): built with nvcc on the GPU box by random_streams_device.sh.
// 1. One kernel per device function that the random kernels of torch use (logf, __sincosf, expf, tanf,
//    log1pf, erfinvf and the double ones), so `cuobjdump -sass` shows each one's machine code.
// 3. `curand_math_probe table DIR`: __sincosf's results for every cell q = floor(z * 2^25), q = 0 .. 2^25
//    (z = RZ(v * 0.15915494f), found by searching v near q * 2^-25 / 0.15915494; found[q] = 0 where no
//    float v lands in the cell), written raw to DIR/sin.bin, DIR/cos.bin (uint32 bits) and DIR/found.bin.
// 2. Whether __sincosf (the hardware's MUFU.SIN/COS after a multiply by 1/(2 pi) rounded toward zero)
//    depends on its argument only through a fixed-point quantisation z -> floor(z * 2^K) of
//    z = RZ(v * 0.15915494f): for every positive float v up to 2 pi and its predecessor, counts the pairs
//    in one quantisation cell whose results differ (per K); K with no such pair bounds a table's size.
#include <cstdio>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <cstdlib>

extern "C" __global__ void k_logf(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = logf(x[i]); }
extern "C" __global__ void k_sincosf(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { float s, c; __sincosf(x[i], &s, &c); y[2 * i] = s; y[2 * i + 1] = c; } }
extern "C" __global__ void k_expf(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = expf(x[i]); }
extern "C" __global__ void k_tanf(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = tanf(x[i]); }
extern "C" __global__ void k_log1pf(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = log1pf(x[i]); }
extern "C" __global__ void k_erfinvf(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = erfinvf(x[i]); }
extern "C" __global__ void k_sqrtf(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = sqrtf(x[i]); }
extern "C" __global__ void k_log(const double* x, double* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = log(x[i]); }
extern "C" __global__ void k_sincospi(const double* x, double* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { double s, c; sincospi(x[i], &s, &c); y[2 * i] = s; y[2 * i + 1] = c; } }
extern "C" __global__ void k_exp(const double* x, double* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = exp(x[i]); }
extern "C" __global__ void k_tan(const double* x, double* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = tan(x[i]); }
extern "C" __global__ void k_erfinv(const double* x, double* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = erfinv(x[i]); }

constexpr int KMIN = 14, KMAX = 40, NK = KMAX - KMIN + 1;
__device__ unsigned long long same_cell[NK], differ_sin[NK], differ_cos[NK], same_z_differ;

__global__ void quantisation(uint32_t first, uint32_t last) {
  uint64_t start = first + (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 256;
  unsigned long long cell[NK] = {0}, ds[NK] = {0}, dc[NK] = {0}, zd = 0;
  for (uint64_t b = start; b < start + 256 && b <= last; ++b) {
    float v = __uint_as_float(uint32_t(b)), vp = __uint_as_float(uint32_t(b - 1));
    float s, c, sp, cp;
    __sincosf(v, &s, &c);
    __sincosf(vp, &sp, &cp);
    float z = __fmul_rz(v, 0.15915494f), zp = __fmul_rz(vp, 0.15915494f);
    if (z == zp && (s != sp || c != cp)) ++zd;
    for (int k = 0; k < NK; ++k) {
      double scale = ldexp(1.0, KMIN + k);
      if (floor(double(z) * scale) == floor(double(zp) * scale)) {
        ++cell[k];
        ds[k] += (s != sp);
        dc[k] += (c != cp);
      }
    }
  }
  for (int k = 0; k < NK; ++k) {
    if (cell[k]) atomicAdd(&same_cell[k], cell[k]);
    if (ds[k]) atomicAdd(&differ_sin[k], ds[k]);
    if (dc[k]) atomicAdd(&differ_cos[k], dc[k]);
  }
  if (zd) atomicAdd(&same_z_differ, zd);
}

constexpr uint32_t CELLS = (1u << 25) + 1;

__global__ void table(uint32_t* sin_bits, uint32_t* cos_bits, uint8_t* found) {
  uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= CELLS) return;
  float v = float(ldexp(double(q), -25) / double(0.15915494f));
  found[q] = 0;
  sin_bits[q] = cos_bits[q] = 0;
  int direction = 0;
  for (int step = 0; step < 64; ++step) {
    double cell = floor(double(__fmul_rz(v, 0.15915494f)) * 33554432.0);
    if (cell == double(q)) {
      float s, c;
      __sincosf(v, &s, &c);
      sin_bits[q] = __float_as_uint(s);
      cos_bits[q] = __float_as_uint(c);
      found[q] = 1;
      return;
    }
    int want = cell < double(q) ? 1 : -1;
    if (direction != 0 && want != direction) return;  // stepped over the cell: no float lands in it
    direction = want;
    v = nextafterf(v, want > 0 ? INFINITY : 0.0f);
  }
}

int dump_table(const char* dir) {
  uint32_t *s, *c;
  uint8_t* f;
  cudaMalloc(&s, CELLS * 4ull);
  cudaMalloc(&c, CELLS * 4ull);
  cudaMalloc(&f, CELLS);
  table<<<(CELLS + 255) / 256, 256>>>(s, c, f);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { printf("table: %s\n", cudaGetErrorString(err)); return 1; }
  const void* data[3] = {s, c, f};
  const char* names[3] = {"sin.bin", "cos.bin", "found.bin"};
  size_t sizes[3] = {CELLS * 4ull, CELLS * 4ull, CELLS};
  char* host = (char*)malloc(CELLS * 4ull);
  char path[512];
  for (int i = 0; i < 3; ++i) {
    cudaMemcpy(host, data[i], sizes[i], cudaMemcpyDeviceToHost);
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    FILE* out = fopen(path, "wb");
    fwrite(host, 1, sizes[i], out);
    fclose(out);
  }
  free(host);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && !strcmp(argv[1], "table")) return dump_table(argv[2]);
  // one launch per binade of v: the smallest K whose cells hold no differing pair, per binade
  const float two_pi = 6.2831855f;
  uint32_t top;
  memcpy(&top, &two_pi, 4);
  printf("{\"binades\": [");
  for (uint32_t e = 1; (e << 23) <= top; ++e) {
    uint32_t first = (e << 23) + (e == 1 ? 1 : 0), last = ((e + 1) << 23) - 1;
    if (last > top) last = top;
    unsigned long long zero[NK] = {0}, z0 = 0;
    cudaMemcpyToSymbol(same_cell, zero, sizeof zero);
    cudaMemcpyToSymbol(differ_sin, zero, sizeof zero);
    cudaMemcpyToSymbol(differ_cos, zero, sizeof zero);
    cudaMemcpyToSymbol(same_z_differ, &z0, sizeof z0);
    uint64_t count = uint64_t(last) - first + 1, threads = (count + 255) / 256;
    quantisation<<<(threads + 255) / 256, 256>>>(first, last);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) { printf("]}\n{\"error\": \"%s\"}\n", cudaGetErrorString(err)); return 1; }
    unsigned long long cell[NK], ds[NK], dc[NK], zd;
    cudaMemcpyFromSymbol(cell, same_cell, sizeof cell);
    cudaMemcpyFromSymbol(ds, differ_sin, sizeof ds);
    cudaMemcpyFromSymbol(dc, differ_cos, sizeof dc);
    cudaMemcpyFromSymbol(&zd, same_z_differ, sizeof zd);
    int ks = -1, kc = -1;
    for (int k = 0; k < NK; ++k) { if (ks < 0 && ds[k] == 0) ks = KMIN + k; if (kc < 0 && dc[k] == 0) kc = KMIN + k; }
    printf("%s\n{\"v_exponent\": %d, \"same_z_but_differ\": %llu, \"sin_K\": %d, \"cos_K\": %d, "
           "\"differ_sin_at_K\": [", e == 1 ? "" : ",", int(e) - 127, zd, ks, kc);
    for (int k = 0; k < NK; ++k) printf("%s%llu", k ? "," : "", ds[k]);
    printf("], \"differ_cos_at_K\": [");
    for (int k = 0; k < NK; ++k) printf("%s%llu", k ? "," : "", dc[k]);
    printf("], \"pairs_at_K\": [");
    for (int k = 0; k < NK; ++k) printf("%s%llu", k ? "," : "", cell[k]);
    printf("]}");
  }
  printf("\n], \"K_from\": %d}\n", KMIN);
  return 0;
}
