/*
 * The forward pass of llama2.c (Karpathy, MIT), f32, as its `run.c` does
 * it: a row loop per matmul under `#pragma omp parallel for`, attention
 * heads under another, built with -Ofast -march=native -fopenmp. The
 * OpenMP peer of `pool bench`: it decodes the very weights (the same
 * mapping) that the pool's decoder reads.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
    const float *token_embedding, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn;
    const float *w1, *w2, *w3, *rms_final, *wcls;
    float *x, *xb, *xb2, *hb, *hb2, *q, *att, *logits, *key_cache, *value_cache;
} OmpLlama2;

static void rmsnorm(float *o, const float *x, const float *weight, int size) {
    float ss = 0.0f;
    for (int j = 0; j < size; j++) ss += x[j] * x[j];
    ss /= size;
    ss += 1e-5f;
    ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < size; j++) o[j] = weight[j] * (ss * x[j]);
}

static void softmax(float *x, int size) {
    float max_val = x[0];
    for (int i = 1; i < size; i++)
        if (x[i] > max_val) max_val = x[i];
    float sum = 0.0f;
    for (int i = 0; i < size; i++) {
        x[i] = expf(x[i] - max_val);
        sum += x[i];
    }
    for (int i = 0; i < size; i++) x[i] /= sum;
}

/* W (d,n) @ x (n,) -> xout (d,) */
static void matmul(float *xout, const float *x, const float *w, int n, int d) {
    int i;
#pragma omp parallel for private(i)
    for (i = 0; i < d; i++) {
        float val = 0.0f;
        for (int j = 0; j < n; j++) val += w[(long)i * n + j] * x[j];
        xout[i] = val;
    }
}

void omp_llama2_free(OmpLlama2 *m) {
    if (!m) return;
    free(m->x); free(m->xb); free(m->xb2); free(m->hb); free(m->hb2);
    free(m->q); free(m->att); free(m->logits); free(m->key_cache); free(m->value_cache);
    free(m);
}

/* header: the checkpoint's 7 int32; w: the floats after it. NULL on a bad
 * header or no memory. */
OmpLlama2 *omp_llama2_new(const int *header, const float *w) {
    OmpLlama2 *m = calloc(1, sizeof(OmpLlama2));
    if (!m) return NULL;
    m->dim = header[0]; m->hidden_dim = header[1]; m->n_layers = header[2];
    m->n_heads = header[3]; m->n_kv_heads = header[4];
    int shared = header[5] > 0;
    m->vocab_size = abs(header[5]); m->seq_len = header[6];
    if (m->dim <= 0 || m->n_heads <= 0 || m->n_kv_heads <= 0 || m->dim % m->n_heads) {
        free(m);
        return NULL;
    }
    long dim = m->dim, hidden = m->hidden_dim, layers = m->n_layers;
    long head_size = dim / m->n_heads, kv_dim = (dim * m->n_kv_heads) / m->n_heads;
    m->token_embedding = w; w += (long)m->vocab_size * dim;
    m->rms_att = w; w += layers * dim;
    m->wq = w; w += layers * dim * dim;
    m->wk = w; w += layers * dim * kv_dim;
    m->wv = w; w += layers * dim * kv_dim;
    m->wo = w; w += layers * dim * dim;
    m->rms_ffn = w; w += layers * dim;
    m->w1 = w; w += layers * dim * hidden;
    m->w2 = w; w += layers * hidden * dim;
    m->w3 = w; w += layers * dim * hidden;
    m->rms_final = w; w += dim;
    w += (long)m->seq_len * head_size / 2; /* freq_cis_real */
    w += (long)m->seq_len * head_size / 2; /* freq_cis_imag */
    m->wcls = shared ? m->token_embedding : w;
    long cache = layers * m->seq_len * kv_dim;
    m->x = calloc(dim, sizeof(float)); m->xb = calloc(dim, sizeof(float));
    m->xb2 = calloc(dim, sizeof(float)); m->hb = calloc(hidden, sizeof(float));
    m->hb2 = calloc(hidden, sizeof(float)); m->q = calloc(dim, sizeof(float));
    m->att = calloc((long)m->n_heads * m->seq_len, sizeof(float));
    m->logits = calloc(m->vocab_size, sizeof(float));
    m->key_cache = calloc(cache, sizeof(float)); m->value_cache = calloc(cache, sizeof(float));
    if (!m->x || !m->xb || !m->xb2 || !m->hb || !m->hb2 || !m->q || !m->att || !m->logits ||
        !m->key_cache || !m->value_cache) {
        omp_llama2_free(m);
        return NULL;
    }
    return m;
}

static float *forward(OmpLlama2 *m, int token, int pos) {
    int dim = m->dim, hidden_dim = m->hidden_dim, head_size = dim / m->n_heads;
    int kv_dim = (dim * m->n_kv_heads) / m->n_heads, kv_mul = m->n_heads / m->n_kv_heads;
    float *x = m->x;
    memcpy(x, m->token_embedding + (long)token * dim, dim * sizeof(float));
    for (long l = 0; l < m->n_layers; l++) {
        rmsnorm(m->xb, x, m->rms_att + l * dim, dim);
        long loff = l * m->seq_len * kv_dim;
        float *k = m->key_cache + loff + (long)pos * kv_dim;
        float *v = m->value_cache + loff + (long)pos * kv_dim;
        matmul(m->q, m->xb, m->wq + l * dim * dim, dim, dim);
        matmul(k, m->xb, m->wk + l * dim * kv_dim, dim, kv_dim);
        matmul(v, m->xb, m->wv + l * dim * kv_dim, dim, kv_dim);
        for (int i = 0; i < dim; i += 2) {
            int head_dim = i % head_size;
            float freq = 1.0f / powf(10000.0f, head_dim / (float)head_size);
            float val = pos * freq, fcr = cosf(val), fci = sinf(val);
            int rotn = i < kv_dim ? 2 : 1;
            for (int r = 0; r < rotn; r++) {
                float *vec = r == 0 ? m->q : k;
                float v0 = vec[i], v1 = vec[i + 1];
                vec[i] = v0 * fcr - v1 * fci;
                vec[i + 1] = v0 * fci + v1 * fcr;
            }
        }
        int h;
#pragma omp parallel for private(h)
        for (h = 0; h < m->n_heads; h++) {
            float *q = m->q + h * head_size, *att = m->att + (long)h * m->seq_len;
            for (int t = 0; t <= pos; t++) {
                const float *kk = m->key_cache + loff + (long)t * kv_dim + (h / kv_mul) * head_size;
                float score = 0.0f;
                for (int i = 0; i < head_size; i++) score += q[i] * kk[i];
                att[t] = score / sqrtf(head_size);
            }
            softmax(att, pos + 1);
            float *xb = m->xb + h * head_size;
            memset(xb, 0, head_size * sizeof(float));
            for (int t = 0; t <= pos; t++) {
                const float *vv = m->value_cache + loff + (long)t * kv_dim + (h / kv_mul) * head_size;
                float a = att[t];
                for (int i = 0; i < head_size; i++) xb[i] += a * vv[i];
            }
        }
        matmul(m->xb2, m->xb, m->wo + l * dim * dim, dim, dim);
        for (int i = 0; i < dim; i++) x[i] += m->xb2[i];
        rmsnorm(m->xb, x, m->rms_ffn + l * dim, dim);
        matmul(m->hb, m->xb, m->w1 + l * dim * hidden_dim, dim, hidden_dim);
        matmul(m->hb2, m->xb, m->w3 + l * dim * hidden_dim, dim, hidden_dim);
        for (int i = 0; i < hidden_dim; i++) {
            float val = m->hb[i];
            val *= 1.0f / (1.0f + expf(-val));
            m->hb[i] = val * m->hb2[i];
        }
        matmul(m->xb, m->hb, m->w2 + l * dim * hidden_dim, hidden_dim, dim);
        for (int i = 0; i < dim; i++) x[i] += m->xb[i];
    }
    rmsnorm(x, x, m->rms_final, dim);
    matmul(m->logits, x, m->wcls, m->dim, m->vocab_size);
    return m->logits;
}

/* Greedy decoding from BOS (token 1) on `threads` OpenMP threads: writes
 * `steps` tokens and the seconds taken after the first one. Returns the
 * tokens written. */
int omp_llama2_generate(OmpLlama2 *m, int steps, int threads, int *tokens, double *after_first) {
    omp_set_num_threads(threads);
    if (steps > m->seq_len) steps = m->seq_len;
    int token = 1;
    double start = 0.0;
    for (int pos = 0; pos < steps; pos++) {
        float *logits = forward(m, token, pos);
        int next = 0;
        for (int i = 1; i < m->vocab_size; i++)
            if (logits[i] > logits[next]) next = i;
        tokens[pos] = next;
        token = next;
        if (pos == 0) start = omp_get_wtime();
    }
    *after_first = steps > 0 ? omp_get_wtime() - start : 0.0;
    return steps;
}
