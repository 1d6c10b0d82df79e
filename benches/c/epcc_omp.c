/* The OpenMP peer of the EPCC-style suite (pool-benches `peers`): each
 * construct as a C engine writes it with OpenMP, calling back into Rust for
 * the work (a calibrated delay, a matvec's rows), so every peer runs the
 * same work and only the construct differs. Built by build.rs with
 * -fopenmp; libgomp's defaults (OMP_WAIT_POLICY unset: spin, then sleep). */
#include <stddef.h>
#include <omp.h>

typedef void (*share_fn)(void *ctx, size_t idx, size_t n);
typedef double (*value_fn)(void *ctx, size_t idx, size_t n);
typedef void (*range_fn)(void *ctx, size_t start, size_t end);

/* A parallel region: every thread runs its share. */
void epcc_omp_region(int threads, share_fn f, void *ctx) {
#pragma omp parallel num_threads(threads)
    f(ctx, (size_t)omp_get_thread_num(), (size_t)omp_get_num_threads());
}

/* One region, `barriers` times: a share, then `#pragma omp barrier`. */
void epcc_omp_barriers(int threads, int barriers, share_fn f, void *ctx) {
#pragma omp parallel num_threads(threads)
    {
        size_t idx = (size_t)omp_get_thread_num(), n = (size_t)omp_get_num_threads();
        for (int b = 0; b < barriers; b++) {
            f(ctx, idx, n);
#pragma omp barrier
        }
    }
}

/* Each thread's value, summed by a reduction clause. */
double epcc_omp_reduce(int threads, value_fn f, void *ctx) {
    double sum = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    sum += f(ctx, (size_t)omp_get_thread_num(), (size_t)omp_get_num_threads());
    return sum;
}

/* A row job with OpenMP's default rule, schedule(static): one contiguous
 * block of rows per thread, each handed to `f` in one call (as a C engine's
 * `#pragma omp for` over rows would run them). */
void epcc_omp_rows(int threads, size_t rows, range_fn f, void *ctx) {
#pragma omp parallel num_threads(threads)
    {
        size_t idx = (size_t)omp_get_thread_num(), n = (size_t)omp_get_num_threads();
        size_t start = rows * idx / n, end = rows * (idx + 1) / n;
        if (start < end)
            f(ctx, start, end);
    }
}
