/* Exercises every call of pool_ffi.h; built and run by tests/c_program.rs.
 * Prints "ok <check>" lines and exits 0 when all hold. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "pool_ffi.h"

#define CHECK(cond, name)                                   \
    do {                                                    \
        if (!(cond)) {                                      \
            fprintf(stderr, "FAILED %s (line %d)\n", name, __LINE__); \
            return 1;                                       \
        }                                                   \
        printf("ok %s\n", name);                            \
    } while (0)

struct squares {
    double *out;
    size_t calls;
};

static void square_rows(void *ctx, size_t start, size_t end) {
    struct squares *s = (struct squares *)ctx;
    for (size_t i = start; i < end; i++) {
        s->out[i] = (double)i * (double)i;
    }
    __atomic_fetch_add(&s->calls, 1, __ATOMIC_RELAXED);
}

static void count_participants(void *ctx, size_t idx, size_t n) {
    size_t *seen = (size_t *)ctx;
    if (idx < n) {
        __atomic_fetch_add(&seen[0], 1, __ATOMIC_RELAXED);
        __atomic_store_n(&seen[1], n, __ATOMIC_RELAXED);
    }
}

int main(void) {
    /* A forced width wins over the environment. */
    pool_set_forced_width(3);
    PoolHandle *pool = pool_create_from_env();
    CHECK(pool != NULL, "create_from_env");
    CHECK(pool_workers(pool) == 2, "forced width 3 = 2 workers + caller");
#ifdef __linux__
    int32_t held[64];
    size_t held_count = pool_held_cpus(held, 64);
    CHECK(held_count >= 1, "a planned pool holds its pinned CPUs");
    /* A second planned pool never pins onto them. */
    PoolHandle *beside = pool_create_from_env();
    CHECK(beside != NULL, "a second planned pool");
    CHECK(pool_held_cpus(NULL, 0) >= held_count, "held CPUs only grow while both live");
    pool_destroy(beside);
#endif

    size_t rows = 10000;
    struct squares s = { calloc(rows, sizeof(double)), 0 };
    CHECK(pool_run_rows(pool, rows, square_rows, &s) == POOL_OK, "run_rows");
    int all = 1;
    for (size_t i = 0; i < rows; i++) {
        all &= s.out[i] == (double)i * (double)i;
    }
    CHECK(all, "every row computed");
    CHECK(s.calls >= 1, "callback called");
    CHECK(pool_run_rows(pool, 0, square_rows, &s) == POOL_OK, "zero rows");
    CHECK(pool_run_rows(pool, rows, NULL, &s) == POOL_ENULL, "null callback refused");
    CHECK(pool_run_rows(NULL, rows, square_rows, &s) == POOL_ENULL, "null pool refused");

    int32_t tids[8];
    size_t n = pool_worker_tids(pool, tids, 8);
    CHECK(n == 2, "two worker tids");
#ifdef __linux__
    CHECK(tids[0] > 0 && tids[1] > 0 && tids[0] != tids[1], "tids are distinct kernel ids");
#endif

    PoolStatsC stats;
    memset(&stats, 0, sizeof stats);
    CHECK(pool_stats(pool, &stats) == POOL_OK, "stats");
    CHECK(stats.dispatches_full + stats.dispatches_limited >= 1, "a dispatch counted");
    /* A row job's workers run it or, when the caller did all its rows
       before they started, have their invitations withdrawn. */
    CHECK(stats.jobs_hot + stats.jobs_after_park + stats.withdrawn >= 1,
          "each invitation run or withdrawn");
    CHECK(pool_stats(pool, NULL) == POOL_ENULL, "null stats refused");
    pool_destroy(pool);

    /* pool_run: every participant once; pool_set_spin; dispatch counts. */
    PoolHandle *three = pool_create(2);
    CHECK(three != NULL, "create for pool_run");
    CHECK(pool_set_spin(three, 0) == POOL_OK, "set a fixed spin budget");
    CHECK(pool_set_spin(three, -1) == POOL_OK, "back to the adaptive policy");
    CHECK(pool_set_spin(NULL, 0) == POOL_ENULL, "null pool refused by set_spin");
    uint64_t before = pool_dispatch_count();
    size_t seen[2] = { 0, 0 };
    CHECK(pool_run(three, count_participants, seen) == POOL_OK, "run");
    CHECK(seen[0] == seen[1] && seen[1] >= 1 && seen[1] <= 3, "each participant once");
    CHECK(pool_dispatch_count() >= before, "dispatch count never goes back");
    CHECK(pool_run(three, NULL, seen) == POOL_ENULL, "null job refused");
    CHECK(pool_run(NULL, count_participants, seen) == POOL_ENULL, "null pool refused by run");

    int32_t all_tids[64];
    size_t live = pool_all_worker_tids(all_tids, 64);
#ifdef __linux__
    CHECK(live >= 2, "every pool's workers listed");
#endif

    /* The process-wide pool: never NULL, the same every time, never freed. */
    PoolHandle *global = pool_global();
    CHECK(global != NULL && global == pool_global(), "one global pool");
    seen[0] = 0;
    CHECK(pool_run(global, count_participants, seen) == POOL_OK, "run on the global pool");
    CHECK(seen[0] == seen[1], "global: each participant once");
    pool_destroy(global); /* ignored */
    CHECK(pool_run(global, count_participants, seen) == POOL_OK, "the global pool survives destroy");
    pool_destroy(three);
    (void)live;

    pool_set_forced_width(0);
    PoolHandle *two = pool_create(1);
    CHECK(two != NULL && pool_workers(two) == 1, "create with a width");
    pool_destroy(two);
    pool_destroy(NULL);
    CHECK(pool_workers(NULL) == 0, "null handle reads as empty");

    /* The runner sets CMF_POOL_SPIN=fast: a bad value the pools above read,
       ignored for the adaptive policy and reported here. */
    size_t needed = pool_env_warnings(NULL, 0);
    CHECK(needed > 0, "a bad environment value is reported");
    char text[512];
    CHECK(pool_env_warnings(text, sizeof text) == needed, "the full length every call");
    CHECK(strstr(text, "CMF_POOL_SPIN") != NULL && strstr(text, "fast") != NULL,
          "the warning names the variable and its value");
    char cut[8];
    CHECK(pool_env_warnings(cut, sizeof cut) == needed && strlen(cut) == sizeof cut - 1,
          "a short buffer is cut and terminated");
    free(s.out);
    printf("all passed\n");
    return 0;
}
