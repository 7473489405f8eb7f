/* Unit tests: SHA-256, HMAC-SHA256 (published vectors), base64 (RFC 4648), hex. */
#include <string.h>

#include "common/crypto.h"
#include "common/err.h"
#include "tests/th.h"

static const char *hex_of(const uint8_t *d, size_t n)
{
    static char out[256];
    return hex_encode(d, n, out);
}

TEST(sha256_known_answers)
{
    uint8_t d[SHA256_LEN];
    /* FIPS 180-2 examples */
    CHECK_EQ_INT(sha256("abc", 3, d), 0);
    CHECK_EQ_STR(hex_of(d, 32), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK_EQ_INT(sha256("", 0, d), 0);
    CHECK_EQ_STR(hex_of(d, 32), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK_EQ_INT(sha256(m, strlen(m), d), 0);
    CHECK_EQ_STR(hex_of(d, 32), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(sha256_streaming_equals_one_shot)
{
    uint8_t a[SHA256_LEN], b[SHA256_LEN];
    char data[1000];
    for (int i = 0; i < 1000; i++)
        data[i] = (char)(i * 7);
    sha256(data, sizeof data, a);
    struct sha256_ctx *c = sha256_new();
    CHECK(c != NULL);
    for (int off = 0; off < 1000; off += 37)
        CHECK_EQ_INT(sha256_update(c, data + off, off + 37 <= 1000 ? 37 : 1000 - off), 0);
    CHECK_EQ_INT(sha256_final(c, b), 0);
    CHECK(memcmp(a, b, 32) == 0);
    sha256_free(sha256_new());
    sha256_free(NULL);
}

TEST(hmac_sha256_rfc4231)
{
    uint8_t d[SHA256_LEN], key[20];
    /* test case 1 */
    memset(key, 0x0b, 20);
    CHECK_EQ_INT(hmac_sha256(key, 20, "Hi There", 8, d), 0);
    CHECK_EQ_STR(hex_of(d, 32), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    /* test case 2 */
    const char *data = "what do ya want for nothing?";
    CHECK_EQ_INT(hmac_sha256("Jefe", 4, data, strlen(data), d), 0);
    CHECK_EQ_STR(hex_of(d, 32), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* test case 6: key longer than the block size */
    uint8_t longkey[131];
    memset(longkey, 0xaa, sizeof longkey);
    const char *t6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    CHECK_EQ_INT(hmac_sha256(longkey, sizeof longkey, t6, strlen(t6), d), 0);
    CHECK_EQ_STR(hex_of(d, 32), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(crypto_equal_compares)
{
    CHECK(crypto_equal("abcd", "abcd", 4));
    CHECK(!crypto_equal("abcd", "abce", 4));
    CHECK(crypto_equal("x", "y", 0));
}

TEST(base64_rfc4648_vectors)
{
    static const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *out[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char enc[32];
        size_t n = base64_encode(in[i], strlen(in[i]), enc);
        CHECK_EQ_STR(enc, out[i]);
        CHECK_EQ_INT(n, BASE64_LEN(strlen(in[i])));
        uint8_t dec[32];
        size_t dn = 99;
        CHECK_EQ_INT(base64_decode(enc, n, dec, sizeof dec, &dn), 0);
        CHECK_EQ_INT(dn, strlen(in[i]));
        CHECK(memcmp(dec, in[i], dn) == 0);
    }
}

TEST(base64_decode_rejects_malformed)
{
    uint8_t d[16];
    size_t n;
    CHECK_EQ_INT(base64_decode("Zm9", 3, d, sizeof d, &n), ERR_PARSE);   /* length */
    CHECK_EQ_INT(base64_decode("Zm9*", 4, d, sizeof d, &n), ERR_PARSE);  /* alphabet */
    CHECK_EQ_INT(base64_decode("Z===", 4, d, sizeof d, &n), ERR_PARSE);  /* too much padding */
    CHECK_EQ_INT(base64_decode("Zg=a", 4, d, sizeof d, &n), ERR_PARSE);  /* data after '=' */
    CHECK_EQ_INT(base64_decode("Zg==Zg==", 8, d, sizeof d, &n), ERR_PARSE); /* padding mid-stream */
    CHECK_EQ_INT(base64_decode("Zh==", 4, d, sizeof d, &n), ERR_PARSE);  /* non-canonical bits */
    CHECK_EQ_INT(base64_decode("Zm9vYmFy", 8, d, 5, &n), ERR_TOOBIG);
}

TEST(random_bytes_differ)
{
    uint8_t a[32], b[32];
    CHECK_EQ_INT(crypto_random(a, 32), 0);
    CHECK_EQ_INT(crypto_random(b, 32), 0);
    CHECK(memcmp(a, b, 32) != 0);
}
