/* Unit tests of RoPE (kernels/cpu/rope.c): the two layouts against each
 * other and known angles, and the per-step angle table against the direct
 * rotation, bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kn.h"
#include "tests/th.h"

/* NORM rope on rows permuted the way the llama converter permutes Q/K equals
 * NEOX rope on the unpermuted rows, permuted (model.h, RoPE). */
TEST(kn_rope_norm_is_neox_on_permuted_rows)
{
    enum { HD = 16, NH = 2 };
    float x[NH * HD], xp[NH * HD];
    for (int i = 0; i < NH * HD; i++)
        x[i] = sinf((float)i * 0.7f) + 0.1f * (float)i;
    /* permuted: GGUF row 2i = HF row i, row 2i+1 = HF row i + HD/2 */
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < HD / 2; i++) {
            xp[h * HD + 2 * i] = x[h * HD + i];
            xp[h * HD + 2 * i + 1] = x[h * HD + i + HD / 2];
        }
    int32_t pos = 11;
    float ff[HD / 2];
    for (int i = 0; i < HD / 2; i++)
        ff[i] = 1.0f + (float)i;
    kn_rope_f32(x, 1, NH, HD, HD, &pos, 10000.0f, 0.5f, ff, KN_ROPE_NEOX);
    kn_rope_f32(xp, 1, NH, HD, HD, &pos, 10000.0f, 0.5f, ff, KN_ROPE_NORM);
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < HD / 2; i++) {
            CHECK(xp[h * HD + 2 * i] == x[h * HD + i]);
            CHECK(xp[h * HD + 2 * i + 1] == x[h * HD + i + HD / 2]);
        }
    /* position 0 is the identity; the angle of pair 1 at pos 11 is known */
    float y[4] = {1, 2, 3, 4};
    int32_t p0 = 0, p1 = 11;
    kn_rope_f32(y, 1, 1, 4, 4, &p0, 10000.0f, 1.0f, NULL, KN_ROPE_NORM);
    CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3 && y[3] == 4);
    kn_rope_f32(y, 1, 1, 4, 4, &p1, 100.0f, 1.0f, NULL, KN_ROPE_NORM);
    double th = 11.0 / 10.0; /* 100^(-2/4) = 0.1 */
    CHECK_NEAR(y[2], 3 * cos(th) - 4 * sin(th), 1e-6);
    CHECK_NEAR(y[3], 3 * sin(th) + 4 * cos(th), 1e-6);
}

/* The forward pass computes the angles once per step (kn_rope_table) and
 * rotates q and k of every layer with them: the same bits as kn_rope_f32,
 * both layouts, with and without freq_factors, n_rot < head_dim. */
TEST(kn_rope_table_equals_rope_f32)
{
    enum { NT = 5, NH = 3, HD = 24 };
    const int32_t pos[NT] = {0, 1, 77, 1000, 4095};
    float ff[HD / 2];
    for (int i = 0; i < HD / 2; i++)
        ff[i] = 1.0f + 0.25f * (float)i;
    for (int mode = 0; mode <= 2; mode += 2)
        for (int n_rot = 8; n_rot <= HD; n_rot += 16)
            for (int f = 0; f < 2; f++) {
                float a[NT * NH * HD], b[NT * NH * HD], cs[NT * HD];
                for (int i = 0; i < NT * NH * HD; i++)
                    a[i] = b[i] = sinf((float)i * 0.37f) * 3.0f;
                kn_rope_f32(a, NT, NH, HD, n_rot, pos, 10000.0f, 0.75f, f ? ff : NULL,
                            (enum kn_rope_mode)mode);
                kn_rope_table(cs, NT, n_rot, pos, 10000.0f, 0.75f, f ? ff : NULL);
                kn_rope_apply_f32(b, NT, NH, HD, n_rot, cs, (enum kn_rope_mode)mode);
                CHECK(memcmp(a, b, sizeof a) == 0);
            }
}
