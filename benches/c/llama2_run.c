/*
 * llama2c-run: llama2.c's forward pass (llama2_omp.c) as a program of its
 * own, as llama2.c's `run` is one: maps a checkpoint, decodes greedily
 * from BOS, and prints {"tokens_per_s": ...} (tokens after the first over
 * their time, as `pool decode` counts). The peer `pool bench --llama-cpp`
 * runs in a separate process; built by scripts/llama-cpp.sh with
 * -Ofast -march=native -fopenmp.
 *
 *   llama2c-run MODEL.bin [-n STEPS] [-t THREADS]
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct OmpLlama2 OmpLlama2;
OmpLlama2 *omp_llama2_new(const int *header, const float *w);
int omp_llama2_generate(OmpLlama2 *m, int steps, int threads, int *tokens, double *after_first);
void omp_llama2_free(OmpLlama2 *m);

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.bin [-n STEPS] [-t THREADS]\n", argv[0]);
        return 2;
    }
    int steps = 256, threads = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
    }
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < 28) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 1;
    }
    const char *data = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
        fprintf(stderr, "cannot map %s\n", argv[1]);
        return 1;
    }
    OmpLlama2 *m = omp_llama2_new((const int *)data, (const float *)(data + 28));
    if (!m) {
        fprintf(stderr, "the model does not fit this program\n");
        return 1;
    }
    int *tokens = calloc(steps, sizeof(int));
    double after_first = 0.0;
    int done = omp_llama2_generate(m, steps, threads, tokens, &after_first);
    double rate = done > 1 && after_first > 0.0 ? (done - 1) / after_first : 0.0;
    printf("{\"tokens_per_s\": %.3f, \"steps\": %d, \"threads\": %d}\n", rate, done, threads);
    free(tokens);
    omp_llama2_free(m);
    return 0;
}
