/* bench_zst - zstd stream writer throughput vs the zstd CLI (same level, one
 * thread, same input, same run). Prints one line with the ratio.
 *
 * usage: bench_zst [MiB] (default 64) */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/zst.h"

static int count_sink(void *ctx, const void *data, size_t n)
{
    (void)data;
    *(size_t *)ctx += n;
    return 0;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    size_t target = mib << 20;
    struct buf in;
    buf_init(&in, target + 4096);
    /* batch output lines, like the result files jobd writes */
    unsigned seed = 7;
    for (int i = 0; in.len < target; i++) {
        seed = seed * 1103515245u + 12345u;
        if (buf_printf(&in,
                       "{\"id\":\"batch_req_%08d\",\"custom_id\":\"request-%d\",\"response\":{\"status_code\":200,"
                       "\"body\":{\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                       "\"assistant\",\"content\":\"answer %u about topic %u\"},\"finish_reason\":\"stop\"}],"
                       "\"usage\":{\"prompt_tokens\":%u,\"completion_tokens\":%u}}},\"error\":null}\n",
                       i, i, seed % 100000, seed % 977, 20 + seed % 300, 1 + seed % 200))
            break;
    }
    char path[] = "/tmp/bench_zst_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, in.data, in.len) != (ssize_t)in.len)
        return 1;
    close(fd);

    size_t out_bytes = 0;
    struct zst_writer *w;
    zst_writer_new(3, count_sink, &out_bytes, &w);
    uint64_t t0 = clock_mono_ns();
    for (size_t off = 0; off < in.len; off += 65536)
        zst_writer_write(w, in.data + off, in.len - off < 65536 ? in.len - off : 65536);
    zst_writer_end_frame(w);
    double ours = (double)(clock_mono_ns() - t0) / 1e9;
    zst_writer_free(w);

    char cmd[256];
    snprintf(cmd, sizeof cmd, "zstd -q -3 -T1 -c %s > /dev/null", path);
    t0 = clock_mono_ns();
    int rc = system(cmd);
    double cli = (double)(clock_mono_ns() - t0) / 1e9;
    unlink(path);
    if (rc != 0) {
        fprintf(stderr, "bench_zst: zstd CLI failed\n");
        return 1;
    }
    double mb = (double)in.len / 1e6;
    printf("zstd-3 stream writer: %.0f MB/s (ratio %.2f); zstd CLI: %.0f MB/s; ours/CLI = %.2f\n",
           mb / ours, (double)in.len / (double)out_bytes, mb / cli, cli / ours);
    buf_release(&in);
    return 0;
}
