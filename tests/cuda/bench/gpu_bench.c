/*
 * gpu_bench.c - GPU benchmark of the CUDA forward pass on a SYNTHETIC
 * Llama-3-8B (random bf16 weights generated on the device: shapes only,
 * the outputs mean nothing; every line printed says "synthetic").
 *
 * Shapes: 32 layers, hidden 4096, 32 heads, 8 KV heads, head dim 128,
 * SwiGLU 14336, vocab 128256, bf16 weights and KV cache.
 *
 * Measured in the same run, on the same GPU:
 *   - memory bandwidth: device-to-device copy of a 2 GiB buffer
 *     (bytes read + written per second);
 *   - bf16 tensor-core FLOP/s: an 8192^3 cublasGemmEx (bf16 in, fp32 out);
 *   - decode throughput at batch 1, 16, 64, 256, 512 with 1,024-token
 *     contexts (random K/V already in the cache): output tokens/s, with
 *     greedy sampling on the GPU; roofline = (all weight bytes + the KV
 *     bytes read in the step) / measured bandwidth;
 *   - prefill of one 2,048-token prompt in one step: tokens/s; roofline =
 *     (2 * matmul params * tokens + causal attention FLOPs) / measured
 *     FLOP/s.
 * Output: a table on stdout, and with --json FILE the same numbers as JSON.
 *
 *   build/gpu_bench [--batches 1,16,64,256,512] [--ctx 1024] [--prompt 2048]
 *                   [--steps 8] [--json out.json]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "kernels/kn.h"
#include "worker/engine/forward_cuda.h"
#include "worker/engine/kv.h"
#include "worker/engine/model.h"

#define MAX_BATCHES 16

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int die(const char *what, int rc)
{
    fprintf(stderr, "gpu_bench: %s: %s\n", what, err_msg(rc));
    return 1;
}

/* Bandwidth of a D2D copy, GB/s (read + write). */
static int measure_bandwidth(struct kn_cuda *c, double *gbs)
{
    size_t bytes = (size_t)2 << 30;
    void *a = NULL, *b = NULL;
    int rc = kn_cuda_alloc(c, bytes, &a);
    if (!rc)
        rc = kn_cuda_alloc(c, bytes, &b);
    if (!rc)
        rc = kn_cuda_memset(c, a, 1, bytes);
    if (!rc)
        rc = kn_cuda_copy(c, b, a, bytes); /* warm-up */
    double ms = 0;
    int reps = 10;
    if (!rc)
        rc = kn_cuda_timer_start(c);
    for (int i = 0; i < reps && !rc; i++)
        rc = kn_cuda_copy(c, (i & 1) ? a : b, (i & 1) ? b : a, bytes);
    if (!rc)
        rc = kn_cuda_timer_stop(c, &ms);
    if (!rc)
        *gbs = 2.0 * (double)bytes * reps / (ms * 1e-3) / 1e9;
    kn_cuda_release(c, a);
    kn_cuda_release(c, b);
    return rc;
}

/* bf16 GEMM throughput, TFLOP/s. */
static int measure_flops(struct kn_cuda *c, double *tflops)
{
    int n = 8192;
    size_t e = (size_t)n * n;
    void *x = NULL, *w = NULL, *o = NULL;
    int rc = kn_cuda_alloc(c, e * 2, &x);
    if (!rc)
        rc = kn_cuda_alloc(c, e * 2, &w);
    if (!rc)
        rc = kn_cuda_alloc(c, e * 4, &o);
    if (!rc)
        rc = kn_cuda_fill_random_bf16(c, x, e, 1, 1.0f);
    if (!rc)
        rc = kn_cuda_fill_random_bf16(c, w, e, 2, 0.01f);
    if (!rc)
        rc = kn_cuda_gemm_bf16(c, o, (size_t)n, x, w, n, n, n, 0.0f); /* warm-up */
    double ms = 0;
    int reps = 20;
    if (!rc)
        rc = kn_cuda_timer_start(c);
    for (int i = 0; i < reps && !rc; i++)
        rc = kn_cuda_gemm_bf16(c, o, (size_t)n, x, w, n, n, n, 0.0f);
    if (!rc)
        rc = kn_cuda_timer_stop(c, &ms);
    if (!rc)
        *tflops = 2.0 * (double)n * n * n * reps / (ms * 1e-3) / 1e12;
    kn_cuda_release(c, x);
    kn_cuda_release(c, w);
    kn_cuda_release(c, o);
    return rc;
}

/* A host-side kv_cache holding only the geometry and block tables (the
 * values live on the GPU): slot 0 has blocks for pos0 positions (the
 * prefill prompt), every other slot for pos_other; blocks are distinct. */
struct fake_kv {
    struct kv_cache kv;
    int32_t *tables;
};

static int fake_kv_init(struct fake_kv *f, int n_layer, int kv_dim, int n_seq, int pos0,
                        int pos_other)
{
    memset(f, 0, sizeof *f);
    int bt = KV_BLOCK_TOKENS;
    int b0 = (pos0 + bt - 1) / bt, bo = (pos_other + bt - 1) / bt;
    int per_seq = b0 > bo ? b0 : bo;
    f->tables = calloc((size_t)n_seq * per_seq, sizeof(int32_t));
    f->kv.seqs = calloc((size_t)n_seq, sizeof *f->kv.seqs);
    if (!f->tables || !f->kv.seqs)
        return ERR_NOMEM;
    f->kv.n_layer = n_layer;
    f->kv.kv_dim = kv_dim;
    f->kv.block_tokens = bt;
    f->kv.n_seq = n_seq;
    f->kv.max_pos = per_seq * bt;
    f->kv.max_blocks_per_seq = per_seq;
    int next = 0;
    for (int s = 0; s < n_seq; s++) {
        int nb = s == 0 ? (b0 > bo ? b0 : bo) : bo;
        f->kv.seqs[s].blocks = f->tables + (size_t)s * per_seq;
        f->kv.seqs[s].n_blocks = nb;
        for (int j = 0; j < nb; j++)
            f->kv.seqs[s].blocks[j] = next++;
    }
    f->kv.n_blocks = next;
    return 0;
}

static void fake_kv_release(struct fake_kv *f)
{
    free(f->tables);
    free(f->kv.seqs);
}

static void llama3_8b(struct model_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    hp->arch = MODEL_ARCH_LLAMA;
    hp->n_layer = 32;
    hp->n_embd = 4096;
    hp->n_head = 32;
    hp->n_head_kv = 8;
    hp->head_dim = 128;
    hp->n_rot = 128;
    hp->n_ff = 14336;
    hp->n_vocab = 128256;
    hp->n_ctx_train = 8192;
    hp->rms_eps = 1e-5f;
    hp->rope_freq_base = 500000.0f;
    hp->rope_freq_scale = 1.0f;
}

/* Bytes of all weights read per step (bf16), and matmul parameters. */
static double weight_bytes(const struct model_hparams *hp, double *matmul_params)
{
    double e = hp->n_embd, q = (double)hp->n_head * hp->head_dim;
    double kv = (double)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
    double per_layer = e * (q + 2 * kv) + q * e + 2 * ff * e + ff * e;
    double params = per_layer * hp->n_layer + (double)hp->n_vocab * e;
    *matmul_params = params;
    return 2.0 * params + 4.0 * e * (2 * hp->n_layer + 1); /* + f32 norms */
}

struct result {
    int batch;
    double tok_s, ms_step, pct;
};

int main(int argc, char **argv)
{
    int batches[MAX_BATCHES] = {1, 16, 64, 256, 512}, n_batches = 5;
    int ctx = 1024, prompt = 2048, steps = 8;
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            n_batches = 0;
            char *p = argv[++i];
            while (*p && n_batches < MAX_BATCHES) {
                char *end;
                long v = strtol(p, &end, 10);
                if (end == p || v < 1 || v > 4096)
                    return fprintf(stderr, "gpu_bench: bad --batches\n"), 2;
                batches[n_batches++] = (int)v;
                p = *end == ',' ? end + 1 : end;
                if (*end && *end != ',')
                    return fprintf(stderr, "gpu_bench: bad --batches\n"), 2;
            }
        } else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
            ctx = (int)strtol(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) {
            prompt = (int)strtol(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = (int)strtol(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            json = argv[++i];
        } else {
            fprintf(stderr, "usage: gpu_bench [--batches 1,16,64,256,512] [--ctx 1024] "
                            "[--prompt 2048] [--steps 8] [--json FILE]\n");
            return 2;
        }
    }
    if (ctx < 1 || ctx > 65536 || prompt < 1 || prompt > 65536 || steps < 1 || steps > 1000)
        return fprintf(stderr, "gpu_bench: sizes out of range\n"), 2;

    struct kn_cuda *c = NULL;
    int rc = kn_cuda_new(0, 1u << 20, &c);
    if (rc == ERR_NODEVICE) {
        printf("gpu_bench: no GPU (no CUDA device or driver): nothing measured\n");
        return 0;
    }
    if (rc)
        return die("open the GPU", rc);
    char desc[200];
    kn_cuda_describe(c, desc, sizeof desc);
    double bw = 0, tf = 0;
    if ((rc = measure_bandwidth(c, &bw)))
        return die("bandwidth", rc);
    if ((rc = measure_flops(c, &tf)))
        return die("gemm", rc);
    kn_cuda_free(c);
    printf("device: %s\n", desc);
    printf("measured: copy bandwidth %.0f GB/s, bf16 GEMM %.1f TFLOP/s\n", bw, tf);

    struct model_hparams hp;
    llama3_8b(&hp);
    double mm_params;
    double wbytes = weight_bytes(&hp, &mm_params);
    int kv_dim = hp.n_head_kv * hp.head_dim;
    int max_b = 1;
    for (int i = 0; i < n_batches; i++)
        max_b = batches[i] > max_b ? batches[i] : max_b;
    int dec_pos = ctx + steps + 1;
    int max_pos = dec_pos > prompt ? dec_pos : prompt;
    struct fake_kv fk;
    if ((rc = fake_kv_init(&fk, hp.n_layer, kv_dim, max_b, prompt, dec_pos)))
        return die("tables", rc);
    struct model_ctx_params p;
    model_ctx_params_init(&p);
    p.n_ctx = max_pos;
    p.n_batch_max = prompt > max_b ? prompt : max_b;
    p.n_out_max = max_b;
    p.n_seq_max = max_b;
    p.device = KN_DEVICE_CUDA;
    struct fwdcuda *f = NULL;
    double t0 = now_s();
    if ((rc = fwdcuda_new_synthetic(&hp, &p, &fk.kv, 42, &f)))
        return die("synthetic model (weights + KV for the largest batch)", rc);
    printf("synthetic Llama-3-8B shapes, random bf16 weights (%.1f GB) + bf16 KV pool of %d "
           "positions (%.1f GB), set up in %.1f s\n",
           wbytes / 1e9, fk.kv.n_blocks * KV_BLOCK_TOKENS,
           (double)fk.kv.n_blocks * KV_BLOCK_TOKENS * hp.n_layer * kv_dim * 4.0 / 1e9,
           now_s() - t0);

    int32_t *tok = calloc((size_t)p.n_batch_max, 4), *pos = calloc((size_t)p.n_batch_max, 4);
    int32_t *seq = calloc((size_t)p.n_batch_max, 4), *ids = calloc((size_t)max_b, 4);
    int32_t *out_rows = calloc((size_t)max_b, 4);
    if (!tok || !pos || !seq || !ids || !out_rows)
        return die("host buffers", ERR_NOMEM);

    /* prefill: one sequence (slot 0), one step of `prompt` tokens, logits of the last */
    struct result pre = {prompt, 0, 0, 0};
    for (int rep = 0; rep < 3; rep++) { /* first run warms up cuBLAS */
        for (int i = 0; i < prompt; i++) {
            tok[i] = (int32_t)((i * 7919) % hp.n_vocab);
            pos[i] = i;
            seq[i] = 0;
        }
        out_rows[0] = prompt - 1;
        struct model_batch b = {prompt, tok, pos, seq, NULL};
        double s0 = now_s();
        if ((rc = fwdcuda_forward_greedy(f, &fk.kv, &b, out_rows, 1, ids)))
            return die("prefill step", rc);
        double dt = now_s() - s0;
        if (rep == 0 || dt < pre.ms_step / 1e3 || pre.ms_step == 0)
            pre.ms_step = dt * 1e3;
    }
    double n = prompt, attn_flops = 4.0 * hp.n_layer * hp.n_head * hp.head_dim * (n * (n + 1) / 2);
    double pre_flops = 2.0 * mm_params * n + attn_flops;
    pre.tok_s = n / (pre.ms_step / 1e3);
    pre.pct = 100.0 * (pre_flops / (tf * 1e12)) / (pre.ms_step / 1e3);

    /* decode: batch B, every sequence at position ctx (ctx cached positions of
     * random K/V: the pool is random-filled), `steps` steps */
    struct result dec[MAX_BATCHES];
    for (int bi = 0; bi < n_batches; bi++) {
        int B = batches[bi];
        double best = 0;
        for (int rep = 0; rep < 2; rep++) {
            double s0 = now_s();
            for (int st = 0; st < steps; st++) {
                for (int s = 0; s < B; s++) {
                    tok[s] = st == 0 || ids[s] < 0 ? (int32_t)(s % hp.n_vocab) : ids[s];
                    pos[s] = ctx + st;
                    seq[s] = s;
                    out_rows[s] = s;
                }
                struct model_batch b = {B, tok, pos, seq, NULL};
                if ((rc = fwdcuda_forward_greedy(f, &fk.kv, &b, out_rows, B, ids)))
                    return die("decode step", rc);
            }
            double dt = (now_s() - s0) / steps;
            if (rep == 1 || dt < best)
                best = dt; /* rep 0 is a warm-up for this batch size */
        }
        double kv_bytes = 2.0 * hp.n_layer * (double)kv_dim * 2.0 * (double)B * (ctx + steps / 2.0);
        double roof = (wbytes + kv_bytes) / (bw * 1e9);
        dec[bi].batch = B;
        dec[bi].ms_step = best * 1e3;
        dec[bi].tok_s = B / best;
        dec[bi].pct = 100.0 * roof / best;
    }

    printf("\nSYNTHETIC Llama-3-8B bf16 (random weights) on %s\n", desc);
    printf("%-22s %12s %10s %12s\n", "workload", "tok/s", "ms/step", "% roofline");
    for (int bi = 0; bi < n_batches; bi++) {
        char name[64];
        snprintf(name, sizeof name, "decode b=%d ctx=%d", dec[bi].batch, ctx);
        printf("%-22s %12.0f %10.2f %11.1f%%  (bandwidth)\n", name, dec[bi].tok_s,
               dec[bi].ms_step, dec[bi].pct);
    }
    char pname[64];
    snprintf(pname, sizeof pname, "prefill %d", prompt);
    printf("%-22s %12.0f %10.2f %11.1f%%  (bf16 FLOP/s)\n", pname, pre.tok_s, pre.ms_step, pre.pct);
    printf("rooflines from this run: %.0f GB/s copy bandwidth, %.1f TFLOP/s bf16 GEMM\n", bw, tf);
    if (json) {
        FILE *jf = fopen(json, "w");
        if (!jf)
            return die("--json", ERR_IO);
        fprintf(jf, "{\"synthetic\": true, \"model\": \"llama3-8b-shapes-random-bf16\", "
                    "\"device\": \"%s\", \"bandwidth_gbs\": %.1f, \"bf16_tflops\": %.2f, "
                    "\"ctx\": %d, \"decode\": [",
                desc, bw, tf, ctx);
        for (int bi = 0; bi < n_batches; bi++)
            fprintf(jf, "%s{\"batch\": %d, \"tok_s\": %.1f, \"ms_step\": %.3f, \"pct_roofline\": %.1f}",
                    bi ? ", " : "", dec[bi].batch, dec[bi].tok_s, dec[bi].ms_step, dec[bi].pct);
        fprintf(jf, "], \"prefill\": {\"tokens\": %d, \"tok_s\": %.1f, \"ms\": %.3f, "
                    "\"pct_roofline\": %.1f}}\n",
                prompt, pre.tok_s, pre.ms_step, pre.pct);
        fclose(jf);
    }
    free(tok), free(pos), free(seq), free(ids), free(out_rows);
    fwdcuda_free(f);
    fake_kv_release(&fk);
    return 0;
}
