// Counts values into buckets with atomics: many threads hit one bucket.
extern "C" __global__ void histogram(const int *values, int n, unsigned int *buckets, int nbuckets) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    int b = values[i] % nbuckets;
    atomicAdd(&buckets[b], 1u);
  }
}
