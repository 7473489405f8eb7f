/* The file store (jobd/blob): the S3 XML reader, keys, the local store,
 * the s3 store's retries against a scripted server, and the s3 store on a
 * real S3 server (SeaweedFS: JOBD_TEST_S3_ENDPOINT, which tests/run sets
 * from scripts/s3-server; skipped without it). */
#include <curl/curl.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "jobd/blob/blob.h"
#include "jobd/blob/s3xml.h"
#include "tests/th.h"
#include "tests/th_http.h"

#define S3_KEY "jobd-test"
#define S3_SECRET "jobd-test-secret"

/* ---- XML ------------------------------------------------------------------------- */

TEST(s3xml_error_code_and_message_with_entities)
{
    const char *x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"
                    "<Message>a &lt;b&gt; &amp; &#233;&#x41;</Message><Resource>/b/k</Resource></Error>";
    struct s3xml_error e;
    CHECK_EQ_INT(s3xml_error_parse(x, strlen(x), &e), 0);
    CHECK_EQ_STR(e.code, "NoSuchKey");
    CHECK_EQ_STR(e.message, "a <b> & \xc3\xa9" "A");
    const char *other = "<ListBucketResult></ListBucketResult>";
    CHECK_EQ_INT(s3xml_error_parse(other, strlen(other), &e), ERR_PARSE);
}

TEST(s3xml_upload_id_of_initiate_with_namespace_and_cdata)
{
    const char *x = "<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                    "<Bucket>b</Bucket><Key>k</Key><s3:UploadId><![CDATA[ab_<1>]]>cd</s3:UploadId>"
                    "</InitiateMultipartUploadResult>";
    char id[64];
    CHECK_EQ_INT(s3xml_upload_id(x, strlen(x), id, sizeof id), 0);
    CHECK_EQ_STR(id, "ab_<1>cd");
    CHECK_EQ_INT(s3xml_upload_id(x, strlen(x), id, 4), ERR_TOOBIG);
    const char *none = "<InitiateMultipartUploadResult><UploadId></UploadId></InitiateMultipartUploadResult>";
    CHECK_EQ_INT(s3xml_upload_id(none, strlen(none), id, sizeof id), ERR_PARSE);
}

struct seen {
    int n;
    char keys[4][64];
    uint64_t size[4];
    int64_t mtime[4];
};

static int on_obj(void *ctx, const struct s3xml_object *o)
{
    struct seen *s = ctx;
    if (s->n < 4) {
        snprintf(s->keys[s->n], sizeof s->keys[0], "%.60s", o->key);
        s->size[s->n] = o->size_bytes;
        s->mtime[s->n] = o->mtime_s;
    }
    s->n++;
    return 0;
}

TEST(s3xml_list_page_objects_truncation_and_token)
{
    const char *x = "<ListBucketResult><Name>b</Name><IsTruncated>true</IsTruncated>"
                    "<Contents><Key>p/a&amp;b</Key><LastModified>2026-12-03T12:46:07.000Z</LastModified>"
                    "<ETag>&quot;x&quot;</ETag><Size>12</Size></Contents>"
                    "<Contents><Key>p/c</Key><Size>0</Size><Owner><ID>1</ID></Owner></Contents>"
                    "<NextContinuationToken>tok/+=</NextContinuationToken></ListBucketResult>";
    struct seen s = {0};
    int trunc = 0;
    char tok[64];
    CHECK_EQ_INT(s3xml_list_parse(x, strlen(x), on_obj, &s, &trunc, tok, sizeof tok), 0);
    CHECK_EQ_INT(s.n, 2);
    CHECK_EQ_STR(s.keys[0], "p/a&b");
    CHECK_EQ_INT(s.size[0], 12);
    CHECK_EQ_INT(s.mtime[0], 1796301967);
    CHECK_EQ_STR(s.keys[1], "p/c");
    CHECK_EQ_INT(s.mtime[1], 0);
    CHECK_EQ_INT(trunc, 1);
    CHECK_EQ_STR(tok, "tok/+=");
    const char *no_tok = "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>";
    CHECK_EQ_INT(s3xml_list_parse(no_tok, strlen(no_tok), on_obj, &s, &trunc, tok, sizeof tok), ERR_PARSE);
    const char *bad_size = "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>";
    CHECK_EQ_INT(s3xml_list_parse(bad_size, strlen(bad_size), on_obj, &s, &trunc, tok, sizeof tok), ERR_PARSE);
}

TEST(s3xml_refuses_malformed_documents)
{
    static const char *bad[] = {
        "", "   ", "<a>", "<a></b>", "<a><b></a></b>", "<a></a><b></b>", "text<a></a>", "<a>&bogus;</a>",
        "<a>&#0;</a>", "<a>&#xD800;</a>", "<a>&#x110000;</a>", "<a x=\"1></a>", "</a>", "<>", "<a><!-- x </a>",
        "<a><![CDATA[x</a>", "<a>\0</a>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = i == sizeof bad / sizeof bad[0] - 1 ? 8 : strlen(bad[i]);
        int rc = s3xml_walk(bad[i], n, NULL, NULL);
        if (rc != ERR_PARSE)
            th_fail(__FILE__, __LINE__, bad[i], "got %d", rc);
    }
    const char *dtd = "<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>";
    CHECK_EQ_INT(s3xml_walk(dtd, strlen(dtd), NULL, NULL), ERR_UNSUPPORTED);
    const char *deep = "<a><a><a><a><a><a><a><a><a></a></a></a></a></a></a></a></a></a>";
    CHECK_EQ_INT(s3xml_walk(deep, strlen(deep), NULL, NULL), ERR_TOOBIG);
    char big[S3XML_TEXT_MAX + 16];
    memset(big, 'x', sizeof big);
    memcpy(big, "<a>", 3);
    memcpy(big + sizeof big - 4, "</a>", 4);
    CHECK_EQ_INT(s3xml_walk(big, sizeof big, NULL, NULL), ERR_TOOBIG);
    const char *ok = "<?xml version=\"1.0\"?><!-- c --><a k='>'><b/><c>t</c></a>\n";
    CHECK_EQ_INT(s3xml_walk(ok, strlen(ok), NULL, NULL), 0);
    /* a raw NUL inside CDATA is refused like one in plain text (found by fuzz_s3xml) */
    static const char cdata_nul[] = "<a><![CDATA[x\0y]]></a>";
    CHECK_EQ_INT(s3xml_walk(cdata_nul, sizeof cdata_nul - 1, NULL, NULL), ERR_PARSE);
}

/* ---- keys and the local store ------------------------------------------------------ */

TEST(blob_key_ok_takes_storage_paths_only)
{
    CHECK(blob_key_ok("files/file-abc.jsonl.zst"));
    CHECK(blob_key_ok("a"));
    static const char *bad[] = {"", "/a", "a//b", "a/../b", "..", "a/.", "a b", "a/", "a\\b", "\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (blob_key_ok(bad[i]))
            th_fail(__FILE__, __LINE__, bad[i], "accepted");
}

/* A file of n pseudo-random bytes at path (seeded: the same bytes every run). */
static void make_file(const char *path, size_t n, unsigned seed)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        fputc((int)(x & 0xff), f);
    }
    CHECK_EQ_INT(fclose(f), 0);
}

/* Read all of key through a reader in odd-sized reads; compare with path. */
static void check_same(struct blob_store *bs, const char *key, const char *path)
{
    struct blob_reader *r = NULL;
    CHECK_EQ_INT(blob_reader_open(bs, key, &r), 0);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    static char a[70001], b[70001];
    uint64_t total = 0;
    for (;;) {
        ssize_t n = blob_read(r, a, sizeof a);
        CHECK(n >= 0);
        size_t m = fread(b, 1, (size_t)n ? (size_t)n : 1, f);
        if (n == 0) {
            CHECK_EQ_INT(m, 0);
            break;
        }
        CHECK_EQ_INT(m, n);
        CHECK(memcmp(a, b, (size_t)n) == 0);
        total += (uint64_t)n;
    }
    CHECK_EQ_INT(total, blob_reader_size(r));
    fclose(f);
    blob_reader_free(r);
}

static int count_key(void *ctx, const char *key, uint64_t size, int64_t mtime)
{
    (void)key;
    (void)mtime;
    (void)size;
    int *n = ctx;
    (*n)++;
    return 0;
}

TEST(blob_local_put_read_list_delete)
{
    char dir[512], tmp[600], files[600];
    snprintf(dir, sizeof dir, "%s/d", th_tmpdir());
    snprintf(files, sizeof files, "%s/files", dir);
    CHECK_EQ_INT(mkdir(dir, 0700), 0);
    CHECK_EQ_INT(mkdir(files, 0700), 0);
    snprintf(tmp, sizeof tmp, "%s/up", dir);
    make_file(tmp, 300000, 1);
    char copy[600];
    snprintf(copy, sizeof copy, "%s/copy", th_tmpdir());
    make_file(copy, 300000, 1);
    struct blob_store *bs = NULL;
    CHECK_EQ_INT(blob_store_open(&(struct blob_config){.data_dir = dir}, &bs), 0);
    CHECK(!blob_is_remote(bs));
    CHECK_EQ_INT(blob_put_file(bs, "files/a.jsonl.zst", tmp), 0);
    CHECK(access(tmp, F_OK) != 0); /* renamed into place */
    check_same(bs, "files/a.jsonl.zst", copy);
    struct blob_reader *r = NULL;
    CHECK_EQ_INT(blob_reader_open(bs, "files/a.jsonl.zst", &r), 0);
    CHECK(blob_reader_fd(r) >= 0);
    blob_reader_free(r);
    int n = 0;
    CHECK_EQ_INT(blob_list(bs, "files/", count_key, &n), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(blob_delete(bs, "files/a.jsonl.zst"), 0);
    CHECK_EQ_INT(blob_delete(bs, "files/a.jsonl.zst"), 0); /* absent: fine */
    CHECK_EQ_INT(blob_reader_open(bs, "files/a.jsonl.zst", &r), ERR_NOTFOUND);
    CHECK_EQ_INT(blob_reader_open(bs, "../etc/passwd", &r), ERR_INVAL);
    blob_store_free(bs);
}

/* ---- s3 against a scripted server: retries, aborts ---------------------------------------- */

static struct blob_config scripted(int port, char *ep, size_t cap)
{
    snprintf(ep, cap, "http://127.0.0.1:%d", port);
    return (struct blob_config){.url = "s3://bkt/pre", .endpoint = ep, .region = "us-east-1",
                                .access_key = S3_KEY, .secret_key = S3_SECRET, .max_attempts = 2,
                                .part_bytes = BLOB_PART_MIN};
}

TEST(blob_s3_put_retries_a_503_and_signs_with_the_body_hash)
{
    static const struct th_http_step steps[] = {
        {200, NULL, "", 0, 0},                            /* HEAD bucket */
        {503, NULL, "<Error><Code>SlowDown</Code></Error>", 0, 0},
        {200, "ETag: \"e\"\r\n", "", 0, 0},               /* the retried PUT */
    };
    struct th_http s;
    th_http_start(&s, steps, 3);
    char ep[64], path[600];
    struct blob_config c = scripted(s.port, ep, sizeof ep);
    snprintf(path, sizeof path, "%s/small", th_tmpdir());
    FILE *f = fopen(path, "w");
    fputs("abc", f);
    fclose(f);
    struct blob_store *bs = NULL;
    CHECK_EQ_INT(blob_store_open(&c, &bs), 0);
    CHECK_EQ_INT(blob_put_file(bs, "files/x", path), 0);
    th_http_stop(&s);
    CHECK_EQ_INT(s.served, 3);
    CHECK(strncmp(s.head[2], "PUT /bkt/pre/files/x HTTP/1.1", 29) == 0);
    CHECK(strstr(s.head[2], "Authorization: AWS4-HMAC-SHA256 Credential=jobd-test/") != NULL);
    /* sha256("abc") */
    CHECK(strstr(s.head[2], "x-amz-content-sha256: ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") != NULL);
    CHECK(access(path, F_OK) != 0); /* uploaded, then removed */
    blob_store_free(bs);
}

TEST(blob_s3_multipart_that_fails_mid_way_is_aborted_and_keeps_the_file)
{
    static const struct th_http_step steps[] = {
        {200, NULL, "", 0, 0}, /* HEAD bucket */
        {200, NULL, "<InitiateMultipartUploadResult><UploadId>u/1</UploadId></InitiateMultipartUploadResult>", 0, 0},
        {200, "ETag: \"p1\"\r\n", "", 0, 0},  /* part 1 */
        {500, NULL, "", 0, 0},                /* part 2, twice: the attempts run out */
        {0, NULL, NULL, 0, 0},
        {204, NULL, "", 0, 0},                /* abort */
    };
    struct th_http s;
    th_http_start(&s, steps, 6);
    char ep[64], path[600];
    struct blob_config c = scripted(s.port, ep, sizeof ep);
    snprintf(path, sizeof path, "%s/big", th_tmpdir());
    make_file(path, BLOB_PART_MIN + 10, 2);
    struct blob_store *bs = NULL;
    CHECK_EQ_INT(blob_store_open(&c, &bs), 0);
    CHECK_EQ_INT(blob_put_file(bs, "files/y", path), ERR_CONN);
    th_http_stop(&s);
    CHECK_EQ_INT(s.served, 6);
    CHECK(strncmp(s.head[1], "POST /bkt/pre/files/y?uploads= ", 31) == 0);
    if (strncmp(s.head[2], "PUT /bkt/pre/files/y?partNumber=1&uploadId=u%2F1 ", 49) != 0)
        th_fail(__FILE__, __LINE__, "part 1", "%.200s", s.head[2]);
    CHECK(strncmp(s.head[5], "DELETE /bkt/pre/files/y?uploadId=u%2F1 ", 39) == 0);
    CHECK(access(path, F_OK) == 0); /* still the caller's */
    blob_store_free(bs);
}

TEST(blob_s3_open_unreachable_is_err_conn)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK_EQ_INT(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ_INT(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    int port = ntohs(a.sin_port);
    close(fd); /* nothing listens there now */
    char ep[64];
    struct blob_config c = scripted(port, ep, sizeof ep);
    struct blob_store *bs = NULL;
    CHECK_EQ_INT(blob_store_open(&c, &bs), ERR_CONN);
    c.url = "s3://Bad_Bucket";
    CHECK_EQ_INT(blob_store_open(&c, &bs), ERR_INVAL);
}

/* ---- s3 on a real server ------------------------------------------------------------------ */

static const char *s3_endpoint(void)
{
    const char *ep = getenv("JOBD_TEST_S3_ENDPOINT");
    if (!ep || !*ep)
        SKIP("no JOBD_TEST_S3_ENDPOINT (url=$(scripts/s3-server start DIR))");
    return ep;
}

/* A store under a prefix of this test's own, so tests never see each other's keys. */
static struct blob_store *s3_store(const char *test, const char *secret)
{
    char url[256];
    snprintf(url, sizeof url, "s3://jobd/%s-%d", test, (int)getpid());
    struct blob_config c = {.url = url, .endpoint = s3_endpoint(), .region = "us-east-1",
                            .access_key = S3_KEY, .secret_key = secret, .part_bytes = BLOB_PART_MIN};
    struct blob_store *bs = NULL;
    int rc = blob_store_open(&c, &bs);
    if (strcmp(secret, S3_SECRET) == 0)
        CHECK_EQ_INT(rc, 0);
    else
        CHECK_EQ_INT(rc, ERR_AUTH);
    return bs;
}

TEST(blob_s3_wrong_secret_or_missing_bucket_fails_at_open)
{
    CHECK(s3_store("wrong", "not-the-secret") == NULL);
    struct blob_config c = {.url = "s3://no-such-bucket", .endpoint = s3_endpoint(), .region = "us-east-1",
                            .access_key = S3_KEY, .secret_key = S3_SECRET};
    struct blob_store *bs = NULL;
    CHECK_EQ_INT(blob_store_open(&c, &bs), ERR_NOTFOUND);
}

static size_t discard(char *p, size_t s, size_t n, void *a)
{
    (void)p;
    (void)a;
    return s * n;
}

TEST(blob_s3_put_read_delete_and_unsigned_reads_are_refused)
{
    struct blob_store *bs = s3_store("small", S3_SECRET);
    char path[600], copy[600];
    snprintf(path, sizeof path, "%s/f", th_tmpdir());
    snprintf(copy, sizeof copy, "%s/c", th_tmpdir());
    make_file(path, 100000, 3);
    make_file(copy, 100000, 3);
    CHECK_EQ_INT(blob_put_file(bs, "files/a.jsonl.zst", path), 0);
    check_same(bs, "files/a.jsonl.zst", copy);
    /* the same object without a signature */
    char url[512];
    snprintf(url, sizeof url, "%s/jobd/small-%d/files/a.jsonl.zst", s3_endpoint(), (int)getpid());
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    CHECK_EQ_INT(curl_easy_perform(c), CURLE_OK);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    CHECK_EQ_INT(status, 403);
    CHECK_EQ_INT(blob_delete(bs, "files/a.jsonl.zst"), 0);
    CHECK_EQ_INT(blob_delete(bs, "files/a.jsonl.zst"), 0);
    struct blob_reader *r = NULL;
    CHECK_EQ_INT(blob_reader_open(bs, "files/a.jsonl.zst", &r), ERR_NOTFOUND);
    /* an empty file is an object too */
    make_file(path, 0, 0);
    CHECK_EQ_INT(blob_put_file(bs, "files/empty", path), 0);
    CHECK_EQ_INT(blob_reader_open(bs, "files/empty", &r), 0);
    char b[8];
    CHECK_EQ_INT(blob_read(r, b, sizeof b), 0);
    blob_reader_free(r);
    blob_store_free(bs);
}

struct listed {
    int n;
    uint64_t size;
};

static int on_listed(void *ctx, const char *key, uint64_t size, int64_t mtime)
{
    struct listed *l = ctx;
    CHECK(strncmp(key, "files/", 6) == 0);
    CHECK(mtime > 1700000000);
    l->n++;
    l->size += size;
    return 0;
}

TEST(blob_s3_multipart_round_trip_byte_for_byte_in_ranges)
{
    struct blob_store *bs = s3_store("multi", S3_SECRET);
    char path[600], copy[600];
    snprintf(path, sizeof path, "%s/f", th_tmpdir());
    snprintf(copy, sizeof copy, "%s/c", th_tmpdir());
    size_t n = 2 * BLOB_PART_MIN + 12345; /* three parts; three ranges and a bit */
    make_file(path, n, 4);
    make_file(copy, n, 4);
    CHECK_EQ_INT(blob_put_file(bs, "files/big.jsonl.zst", path), 0);
    check_same(bs, "files/big.jsonl.zst", copy);
    make_file(path, 10, 5);
    CHECK_EQ_INT(blob_put_file(bs, "files/small", path), 0);
    make_file(path, 10, 5);
    CHECK_EQ_INT(blob_put_file(bs, "other/x", path), 0);
    struct listed l = {0};
    CHECK_EQ_INT(blob_list(bs, "files/", on_listed, &l), 0);
    CHECK_EQ_INT(l.n, 2);
    CHECK_EQ_INT(l.size, n + 10);
    blob_store_free(bs);
}
