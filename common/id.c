/* id.c - sortable random ids with a type prefix (see id.h). */
#include "id.h"

#include <string.h>

#include "clock.h"
#include "crypto.h"
#include "err.h"

static const char id_alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz"; /* Crockford */

int id_new_at(const char *prefix, int64_t wall_ms, char *out, size_t out_len)
{
    size_t plen = strlen(prefix);
    if (out_len < plen + ID_BODY_LEN + 1)
        return ERR_TOOBIG;
    uint8_t rnd[10];
    if (crypto_random(rnd, sizeof rnd))
        return ERR_CRYPTO;
    /* 128 bits: 48-bit timestamp, 80 random; emitted as 26 base32 digits
     * (130 bits, the top two always zero) most significant first. */
    uint8_t bits[16];
    uint64_t t = (uint64_t)wall_ms & 0xffffffffffffull;
    for (int i = 0; i < 6; i++)
        bits[i] = (uint8_t)(t >> (40 - 8 * i));
    memcpy(bits + 6, rnd, sizeof rnd);
    memcpy(out, prefix, plen);
    for (int d = 0; d < ID_BODY_LEN; d++) {
        int bitpos = d * 5 - 2; /* position of the digit's top bit in the 128 */
        int v = 0;
        for (int k = 0; k < 5; k++) {
            int bp = bitpos + k;
            int bit = bp < 0 ? 0 : (bits[bp / 8] >> (7 - bp % 8)) & 1;
            v = v << 1 | bit;
        }
        out[plen + (size_t)d] = id_alphabet[v];
    }
    out[plen + ID_BODY_LEN] = '\0';
    return 0;
}

int id_new(const char *prefix, char *out, size_t out_len)
{
    return id_new_at(prefix, clock_wall_ms(), out, out_len);
}

int id_valid(const char *prefix, const char *s)
{
    size_t plen = strlen(prefix);
    if (strncmp(s, prefix, plen) != 0 || strlen(s) != plen + ID_BODY_LEN)
        return 0;
    for (size_t i = plen; s[i]; i++)
        if (!strchr(id_alphabet, s[i]))
            return 0;
    return 1;
}
