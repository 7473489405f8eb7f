// attention.cu - causal GQA attention over the paged bf16 KV cache, decode
// and prefill in one kernel (flash-decoding split over the context, online
// softmax, no materialised score matrix).
//
// Shapes (struct kn_cuda_attn in kernels/kn.h): q (n_tok rows of q_stride
// floats, query head h at h*head_dim, after RoPE); K/V cache of one layer,
// rows of n_head_kv*head_dim bf16, position p of a sequence at row
// block_table[p / block_tokens] * block_tokens + p % block_tokens; out
// (n_tok, n_head*head_dim) f32 or bf16.
//
// Grid: (tile, kv head, split). A tile is up to tile_max consecutive batch
// tokens of one sequence (a decode token is a tile of one; a prefill chunk
// is cut into tiles); a split is a range of split_len positions. The CTA
// has one warp per (tile token, query head of the kv head's GQA group), so
// the K/V of a chunk of 32 positions is loaded into shared memory once and
// used by every query row of the group and tile. Per chunk a warp computes
// 32 scores at once (lane j: the full q.k dot product of position j, K rows
// padded against bank conflicts, q in shared memory), takes the chunk's
// max and sum with two 5-step shuffle reductions, rescales its running
// (max m, sum l, accumulator acc) - the online softmax, fp32, expf - and
// accumulates P.V with each lane owning head_dim/32 output dimensions and
// the weights broadcast by shuffle. A row stops at its own position
// (causal). With more than one split every row writes
// (m, l, acc) to the workspace and a second kernel merges the splits with
// their log-sum-exp weights. Splits are chosen so that tiles x kv heads x
// splits fills about two waves of SMs (fixed per launch shape: a token's
// numbers may change at rounding level with the batch composition).
//
// head_dim: any multiple of 8 up to 256 (lanes own ceil(head_dim/32)
// rounded up to 1, 2, 4 or 8 dimensions; lanes past head_dim idle).
//
// Accumulation: fp32 throughout; K/V are bf16 (the cache format). Against
// the CPU reference kn_attn_paged_f32 (kernels/cpu/attention.c) run on the
// same bf16-rounded K/V, q and scale: 1e-5 relative per element in f32
// output (exp and summation order differ); the bf16 output adds bf16
// rounding (4e-3 relative).
#include <math.h>

#include "device.cuh"

extern "C" {
#include "common/err.h"
}

namespace {

constexpr int CH = 32;        // positions per shared-memory chunk
constexpr int MIN_SPLIT = 128; // smallest split (positions)

// DPL: dimensions per lane in the P.V product, HD = a.head_dim <= 32 * DPL
// (lanes past HD idle there).
//
// Shared memory: V chunk (CH x HD bf16, filled with 16-byte vectors), K
// chunk (CH rows of HD/2 + 1 bf16 pairs: the odd row stride in 4-byte words
// keeps the per-lane rows on distinct banks), and one f32 q row per warp.
template <int DPL>
__global__ void __launch_bounds__(1024)
attn_kernel(struct kn_cuda_attn a, int group, int split_len, int n_split)
{
    const int HD = a.head_dim, KS = HD / 2 + 1;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __nv_bfloat16 *sv = (__nv_bfloat16 *)smem_raw;
    __nv_bfloat162 *sk = (__nv_bfloat162 *)(sv + CH * HD);
    float *sq = (float *)(sk + CH * KS);

    const int tile = blockIdx.x, kvh = blockIdx.y, sp = blockIdx.z;
    const int t0 = a.tiles[2 * tile], cnt = a.tiles[2 * tile + 1];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wt = warp / group, wg = warp % group;
    const bool active = wt < cnt;
    const int t = t0 + (active ? wt : 0);
    const int h = kvh * group + wg;
    const int seq = a.tok_seq[t0];
    const int kv_dim = a.n_head_kv * HD;
    const int32_t *bt = a.block_tables + (size_t)seq * a.max_blocks;

    int cta_ctx = 0;
    for (int i = 0; i < cnt; i++)
        cta_ctx = max(cta_ctx, a.tok_pos[t0 + i] + 1);
    const int my_ctx = active ? a.tok_pos[t] + 1 : 0;
    const int p_begin = sp * split_len, p_end = min(p_begin + split_len, cta_ctx);

    // this warp's query row into shared memory (read back by this warp only)
    float *qs = sq + warp * HD;
    const float *qr = a.q + (size_t)t * a.q_stride + (size_t)h * HD;
    for (int d = lane; d < HD; d += 32)
        qs[d] = qr[d];
    __syncwarp();
    const float2 *q2 = (const float2 *)qs;

    float acc[DPL];
    const int d0 = lane * DPL;
#pragma unroll
    for (int i = 0; i < DPL; i++)
        acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const int VPP = HD / 8;  // 16-byte vectors per V row
    const int KPP = HD / 2;  // bf16 pairs per K row
    for (int c0 = p_begin; c0 < p_end; c0 += CH) {
        const int n = min(CH, p_end - c0);
        __syncthreads();
        for (int idx = threadIdx.x; idx < n * VPP; idx += blockDim.x) {
            int pp = idx / VPP, vv = idx % VPP, p = c0 + pp;
            size_t row = (size_t)bt[p / a.block_tokens] * a.block_tokens + p % a.block_tokens;
            size_t off = row * kv_dim + (size_t)kvh * HD;
            ((uint4 *)sv)[idx] = ((const uint4 *)((const __nv_bfloat16 *)a.v_cache + off))[vv];
        }
        for (int idx = threadIdx.x; idx < n * KPP; idx += blockDim.x) {
            int pp = idx / KPP, w = idx % KPP, p = c0 + pp;
            size_t row = (size_t)bt[p / a.block_tokens] * a.block_tokens + p % a.block_tokens;
            size_t off = row * kv_dim + (size_t)kvh * HD;
            sk[pp * KS + w] = ((const __nv_bfloat162 *)((const __nv_bfloat16 *)a.k_cache + off))[w];
        }
        __syncthreads();
        if (!active)
            continue;
        const int lim = min(n, my_ctx - c0); // warp-uniform
        if (lim <= 0)
            continue;
        // scores: lane j takes position c0 + j
        float s = -INFINITY;
        if (lane < lim) {
            const __nv_bfloat162 *kr = sk + lane * KS;
            float dot0 = 0.0f, dot1 = 0.0f;
            for (int w = 0; w < KPP; w++) {
                const float2 kf = __bfloat1622float2(kr[w]);
                const float2 qf = q2[w];
                dot0 = fmaf(qf.x, kf.x, dot0);
                dot1 = fmaf(qf.y, kf.y, dot1);
            }
            s = (dot0 + dot1) * a.scale;
        }
        float cm = s;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
        const float mn = fmaxf(m, cm); // finite: lane 0 always has a position
        const float corr = expf(m - mn); // 0 on the first chunk (m = -inf)
        const float pe = lane < lim ? expf(s - mn) : 0.0f;
        float ps = pe;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            ps += __shfl_xor_sync(0xffffffffu, ps, o);
        l = l * corr + ps;
#pragma unroll
        for (int i = 0; i < DPL; i++)
            acc[i] *= corr;
        for (int pp = 0; pp < lim; pp++) {
            const float w = __shfl_sync(0xffffffffu, pe, pp);
            const __nv_bfloat16 *vr = sv + pp * HD + d0;
#pragma unroll
            for (int i = 0; i < DPL; i++)
                if (d0 + i < HD)
                    acc[i] = fmaf(w, __bfloat162float(vr[i]), acc[i]);
        }
        m = mn;
    }
    if (!active)
        return;
    const size_t oh = (size_t)t * a.n_head + h;
    if (n_split == 1) {
        const float inv = 1.0f / l;
#pragma unroll
        for (int i = 0; i < DPL; i++)
            if (d0 + i < HD)
                kn_store(a.out, a.out_bf16, oh * HD + d0 + i, acc[i] * inv);
        return;
    }
    float *w = a.work + (oh * n_split + sp) * (HD + 2);
    if (lane == 0) {
        w[0] = m;
        w[1] = l;
    }
#pragma unroll
    for (int i = 0; i < DPL; i++)
        if (d0 + i < HD)
            w[2 + d0 + i] = acc[i];
}

// One block per (token, head), one thread per dimension.
__global__ void attn_combine_kernel(void *out, int out_bf16, const float *work, int n_split,
                                    int head_dim)
{
    const size_t oh = blockIdx.x;
    const float *w = work + oh * n_split * (size_t)(head_dim + 2);
    float mx = -INFINITY;
    for (int s = 0; s < n_split; s++)
        mx = fmaxf(mx, w[(size_t)s * (head_dim + 2)]);
    float L = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float *ws = w + (size_t)s * (head_dim + 2);
        if (ws[1] > 0.0f)
            L += ws[1] * expf(ws[0] - mx);
    }
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float *ws = w + (size_t)s * (head_dim + 2);
            if (ws[1] > 0.0f)
                o = fmaf(ws[2 + d], expf(ws[0] - mx), o);
        }
        kn_store(out, out_bf16, oh * head_dim + d, o / L);
    }
}

size_t work_bytes_for(int n_tok, int n_head, int head_dim, int n_split)
{
    return (size_t)n_tok * n_head * n_split * (size_t)(head_dim + 2) * sizeof(float);
}

} // namespace

extern "C" int kn_cuda_attention_tile_max(int n_head, int n_head_kv)
{
    if (n_head_kv <= 0 || n_head % n_head_kv)
        return 1;
    int group = n_head / n_head_kv;
    int t = group > 0 ? 32 / group : 1;
    return t < 1 ? 1 : t > 8 ? 8 : t;
}

extern "C" size_t kn_cuda_attention_work_bytes(int n_tok, int n_head, int head_dim, int max_ctx)
{
    int n_split = (max_ctx + MIN_SPLIT - 1) / MIN_SPLIT;
    return work_bytes_for(n_tok, n_head, head_dim, n_split < 1 ? 1 : n_split);
}

int kn_cuda_attention(struct kn_cuda *c, const struct kn_cuda_attn *a)
{
    if (a->n_tok <= 0 || a->n_tiles <= 0)
        return 0;
    if (a->n_head_kv <= 0 || a->n_head % a->n_head_kv || a->max_ctx <= 0 || a->block_tokens <= 0 ||
        a->tile_max <= 0)
        return ERR_INVAL;
    const int group = a->n_head / a->n_head_kv;
    const int hd = a->head_dim;
    if (hd <= 0 || hd % 8 || hd > 256 || group > 32 || a->tile_max * group > 32)
        return ERR_UNSUPPORTED;
    // split: about two waves of CTAs, never below MIN_SPLIT positions
    long base = (long)a->n_tiles * a->n_head_kv;
    long want = (2L * kn_cuda_sm_count(c) + base - 1) / base;
    int split_len = (int)((a->max_ctx + want - 1) / want);
    split_len = ((split_len + CH - 1) / CH) * CH;
    if (split_len < MIN_SPLIT)
        split_len = MIN_SPLIT;
    int n_split = (a->max_ctx + split_len - 1) / split_len;
    while (n_split > 1 && work_bytes_for(a->n_tok, a->n_head, hd, n_split) > a->work_bytes) {
        split_len *= 2;
        n_split = (a->max_ctx + split_len - 1) / split_len;
    }
    if (n_split > 1 && !a->work)
        return ERR_TOOBIG;
    dim3 grid((unsigned)a->n_tiles, (unsigned)a->n_head_kv, (unsigned)n_split);
    unsigned threads = (unsigned)(a->tile_max * group * 32);
    size_t smem = (size_t)CH * hd * 2 + (size_t)CH * (hd / 2 + 1) * 4 + (size_t)(threads / 32) * hd * 4;
    void (*kern)(struct kn_cuda_attn, int, int, int) = hd <= 32   ? attn_kernel<1>
                                                       : hd <= 64  ? attn_kernel<2>
                                                       : hd <= 128 ? attn_kernel<4>
                                                                   : attn_kernel<8>;
    if (smem > 48u * 1024u) {
        int rc = kn_cuda_check(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    (int)smem),
                               "cudaFuncSetAttribute(attn_kernel)");
        if (rc)
            return rc;
    }
    kern<<<grid, threads, smem, c->stream>>>(*a, group, split_len, n_split);
    int rc = kn_cuda_check(cudaGetLastError(), "attn_kernel");
    if (rc || n_split == 1)
        return rc;
    attn_combine_kernel<<<(unsigned)((size_t)a->n_tok * a->n_head), hd, 0, c->stream>>>(
        a->out, a->out_bf16, a->work, n_split, hd);
    return kn_cuda_check(cudaGetLastError(), "attn_combine_kernel");
}
