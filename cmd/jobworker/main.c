/* jobworker - runs a model for jobd (see README and spec/worker-protocol.md).
 *
 * Modes: serving jobd (--jobd URL --model M.gguf: worker/serve.c), the
 * device self-check, --inspect, the one-off --prompt/--chat/--json run and
 * --bench (worker/oneshot.c), and --batch-file (worker/batchrun.c). Thin:
 * parse flags, call into the library. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/err.h"
#include "kernels/kn.h"
#include "worker/devcheck.h"
#include "worker/inspect.h"
#include "worker/batchrun.h"
#include "worker/serve.h"
#include "worker/oneshot.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* --alias may be given several times (cfg keeps the last): collect them all. */
#define MAX_ALIASES 63
static size_t collect_aliases(int argc, char **argv, const char **out)
{
    size_t n = 0;
    for (int i = 1; i < argc && n < MAX_ALIASES; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--alias") == 0 && i + 1 < argc)
            out[n++] = argv[++i];
        else if (strncmp(argv[i], "--alias=", 8) == 0)
            out[n++] = argv[i] + 8;
    }
    return n;
}

static const char *usage_text =
    "usage: jobworker --jobd URL --model M.gguf [--model-id ID] [--alias A]... [--device cpu|cuda]\n"
    "                 [--threads N] [--worker-token T] [--name NAME] [--drain-timeout DUR]\n"
    "       jobworker --model M.gguf --prompt TEXT | --chat TEXT   (one-off run, no jobd)\n"
    "       jobworker --model M.gguf --batch-file requests.jsonl   (OpenAI batch lines -> output lines)\n"
    "       jobworker --model M.gguf --prompt TEXT | --chat TEXT | --json BODY.json\n"
    "                 [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] [--seed S]\n"
    "                 [--n N] [--stop STR]... [--threads N] [--ctx N] [--exact] [--print-ids]\n"
    "                 (one-off request, no jobd; --json prints the OpenAI response body)\n"
    "       jobworker --model M.gguf --bench [--threads N] [--bench-decode N] [--bench-prompt R]\n"
    "                 (prompt-processing and decode tokens/s)\n"
    "       jobworker --self-check [--device cpu|cuda]\n"
    "       jobworker --model M.gguf --inspect   (print the model's metadata and tensor summary)\n"
    "\n"
    "Pulls leased requests from jobd and runs them through the engine; SIGTERM\n"
    "drains (no new leases, running requests finish within --drain-timeout, the\n"
    "rest is released, results are uploaded) and exits 0.\n"
    "--self-check runs every kernel op on the device against a reference and\n"
    "prints the error and time of each (exit 0 when all are within tolerance).\n"
    "\n"
    "example: jobworker --jobd http://127.0.0.1:8080 --model M.gguf --alias smollm\n"
    "         jobworker --self-check --device cuda\n"
    "\noptions:\n";

/* A float flag value (NULL = not given). Returns 0 or ERR_INVAL. */
static int parse_double(const char *flag, const char *s, int *given, double *out)
{
    if (!s)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        cli_error("jobworker", "see jobworker --help", "--%s: '%s' is not a number", flag, s);
        return ERR_INVAL;
    }
    *given = 1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    struct cli_std std = {0};
    const char *jobd_url = NULL, *model = NULL, *device = "cpu", *prompt = NULL, *chat = NULL,
               *embed = NULL;
    int64_t threads = 0, max_tokens = 256;
    int self_check = 0, inspect = 0, print_ids = 0, no_prefix_cache = 0,
        swa_full = 0;
    const char *batch_file = NULL;
    uint64_t kv_mem = 0;
    int64_t max_batch_tokens = 0, max_seqs = 0;
    const char *model_id = NULL, *alias = NULL, *worker_token = NULL, *name = NULL;
    int64_t pack_size = 0, lease_seconds = 0, drain_ms = 30000;
    const char *json_path = NULL, *temperature = NULL, *top_p = NULL;
    int64_t top_k = INT64_MIN, seed = INT64_MIN, n_choices = 0;
    int64_t n_ctx = 0, bench_decode = 128, bench_prompt = 6;
    int exact = 0, bench = 0;
    /* --stop may repeat (cfg does not): take the pairs out of argv first */
    const char *stops[STOP_MAX], *stop_unused = NULL;
    size_t n_stop = 0;
    int ac = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            while (i < argc)
                argv[ac++] = argv[i++];
            break;
        }
        int eq = strncmp(argv[i], "--stop=", 7) == 0;
        if (!eq && strcmp(argv[i], "--stop") != 0) {
            argv[ac++] = argv[i];
            continue;
        }
        if ((!eq && i + 1 >= argc) || n_stop == STOP_MAX) {
            cli_error("jobworker", "see jobworker --help",
                      n_stop == STOP_MAX ? "--stop: at most 4 stop strings" : "--stop needs a value");
            return CLI_EXIT_USAGE;
        }
        stops[n_stop++] = eq ? argv[i] + 7 : argv[++i];
    }
    argc = ac;
    struct cfg_opt opts[] = {
        {"jobd", "JOBD_URL", CFG_STR, &jobd_url, "URL", "jobd to pull work from"},
        {"model", "JOBWORKER_MODEL", CFG_STR, &model, "M.gguf", "the GGUF model to serve"},
        {"device", "JOBWORKER_DEVICE", CFG_STR, &device, "DEV", "cpu or cuda (default cpu)"},
        {"threads", "JOBWORKER_THREADS", CFG_INT, &threads, "N", "CPU threads (default: all cores)"},
        {"model-id", "JOBWORKER_MODEL_ID", CFG_STR, &model_id, "ID", "model name to register (default: the GGUF's general.name, else the file name)"},
        {"alias", NULL, CFG_STR, &alias, "A", "another name requests may use for the model (repeatable)"},
        {"worker-token", "JOBD_WORKER_TOKEN", CFG_STR, &worker_token, "T", "jobd's worker token"},
        {"name", "JOBWORKER_NAME", CFG_STR, &name, "NAME", "worker name shown by jobd (default host/pid/device)"},
        {"pack-size", NULL, CFG_INT, &pack_size, "N", "requests per lease (default 64)"},
        {"lease-seconds", NULL, CFG_INT, &lease_seconds, "N", "lease length asked for; heartbeats every third (default 120)"},
        {"drain-timeout", NULL, CFG_DURATION, &drain_ms, "DUR", "on SIGTERM, running requests get this long (default 30s)"},
        {"prompt", NULL, CFG_STR, &prompt, "TEXT", "one-off completion of TEXT"},
        {"chat", NULL, CFG_STR, &chat, "TEXT", "one-off chat reply to TEXT"},
        {"embed", NULL, CFG_STR, &embed, "TEXT", "one-off embedding of TEXT (prints the /v1/embeddings response)"},
        {"json", NULL, CFG_STR, &json_path, "FILE", "one-off request: an OpenAI chat/completions body"},
        {"max-tokens", NULL, CFG_INT, &max_tokens, "N", "--prompt/--chat: tokens to generate (default 256)"},
        {"batch-file", NULL, CFG_STR, &batch_file, "FILE", "run an OpenAI batch input file, output lines on stdout"},
        {"kv-mem", "JOBWORKER_KV_MEM", CFG_SIZE, &kv_mem, "BYTES", "KV cache budget (default 256M)"},
        {"max-batch-tokens", NULL, CFG_INT, &max_batch_tokens, "N", "tokens per forward step (default 512)"},
        {"max-seqs", NULL, CFG_INT, &max_seqs, "N", "sequences running at once (default 64)"},
        {"no-prefix-cache", NULL, CFG_BOOL, &no_prefix_cache, NULL, "never share KV blocks between requests"},
        {"swa-full", NULL, CFG_BOOL, &swa_full, NULL,
         "sliding-window layers keep every position (more KV memory; prefix caching for Gemma/Mistral)"},
        {"temperature", NULL, CFG_STR, &temperature, "T", "--prompt/--chat: sampling temperature (default 1)"},
        {"top-p", NULL, CFG_STR, &top_p, "P", "--prompt/--chat: nucleus sampling mass (default 1)"},
        {"top-k", NULL, CFG_INT, &top_k, "K", "--prompt/--chat: sample among the K best (default off)"},
        {"seed", NULL, CFG_INT, &seed, "S", "--prompt/--chat: random seed (default random)"},
        {"n", NULL, CFG_INT, &n_choices, "N", "--prompt/--chat: number of choices (default 1)"},
        {"stop", NULL, CFG_STR, &stop_unused, "STR", "--prompt/--chat: stop string (repeatable, up to 4)"},
        {"ctx", NULL, CFG_INT, &n_ctx, "N", "context length (default: the model's, at most 4096)"},
        {"exact", NULL, CFG_BOOL, &exact, NULL, "reference matmul (float dot products; slow)"},
        {"bench", NULL, CFG_BOOL, &bench, NULL, "print prompt-processing and decode tokens/s"},
        {"bench-decode", NULL, CFG_INT, &bench_decode, "N", "--bench: tokens to decode (default 128)"},
        {"bench-prompt", NULL, CFG_INT, &bench_prompt, "R", "--bench: the prompt sentence repeated R times (default 6: 61 tokens on SmolLM2)"},
        {"print-ids", NULL, CFG_BOOL, &print_ids, NULL, "--prompt/--chat/--json: also print the token ids on stderr"},
        {"self-check", NULL, CFG_BOOL, &self_check, NULL, "check the kernel ops on the device"},
        {"inspect", NULL, CFG_BOOL, &inspect, NULL, "print the model's metadata and tensor summary"},
        CLI_STD_OPTS(&std),
    };
    int n_pos = 0;
    char *pos[1];
    int start = cli_start("jobworker", usage_text, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 0,
                          &n_pos, &std);
    if (start >= 0)
        return start;
    char err[512];
    enum kn_device dev;
    if (kn_device_parse(device, &dev)) {
        cli_error("jobworker", "use --device cpu or --device cuda", "unknown device '%s'", device);
        return CLI_EXIT_USAGE;
    }
    if (dev == KN_DEVICE_CUDA && !kn_cuda_built()) {
        cli_error("jobworker", "rebuild with 'make CUDA=1' on a machine with the CUDA Toolkit",
                  "--device cuda: this build has no CUDA backend");
        return CLI_EXIT_FAIL;
    }
    if (self_check) {
        int rc = devcheck_run(dev, stdout);
        if (rc == ERR_NODEVICE)
            cli_error("jobworker", "check nvidia-smi and the driver", "--device cuda: no usable GPU");
        else if (rc)
            cli_error("jobworker", NULL, "self-check failed: %s", err_msg(rc));
        return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    }
    if (inspect) {
        if (!model) {
            cli_error("jobworker", "see jobworker --help", "--inspect needs --model M.gguf");
            return CLI_EXIT_USAGE;
        }
        int rc = inspect_model(model, stdout, err, sizeof err);
        if (rc)
            cli_error("jobworker", NULL, "cannot load model '%s': %s", model, err);
        return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    }
    if (threads < 0 || threads > KN_POOL_MAX_THREADS || n_ctx < 0 || n_ctx > (1 << 20)) {
        cli_error("jobworker", "see jobworker --help", "--threads must be 0..%d and --ctx 0..%d",
                  KN_POOL_MAX_THREADS, 1 << 20);
        return CLI_EXIT_USAGE;
    }
    if (batch_file) {
        if (!model || max_batch_tokens < 0 || max_batch_tokens > (1 << 20) || max_seqs < 0 ||
            max_seqs > (1 << 16)) {
            cli_error("jobworker", "see jobworker --help", "--batch-file needs --model and sane sizes");
            return CLI_EXIT_USAGE;
        }
        struct batchrun_opts bo = {model, batch_file, (int)threads, (int)max_batch_tokens,
                                   (int)max_seqs, (size_t)kv_mem, (int)n_ctx, no_prefix_cache,
                                   exact, (int)dev, swa_full};
        int rc = batchrun_file(&bo, stdout, stderr, err, sizeof err);
        if (rc)
            cli_error("jobworker", NULL, "%s", err);
        return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    }
    if (bench) {
        if (!model || bench_decode < 1 || bench_decode > 100000 || bench_prompt < 1 || bench_prompt > 1000) {
            cli_error("jobworker", "see jobworker --help",
                      "--bench needs --model, --bench-decode 1..100000, --bench-prompt 1..1000");
            return CLI_EXIT_USAGE;
        }
        struct oneshot_bench_opts bo = {model, (int)threads, (int)bench_prompt, (int)bench_decode, exact,
                                        (int)dev};
        int rc = oneshot_bench(&bo, stdout, err, sizeof err);
        if (rc)
            cli_error("jobworker", NULL, "%s", err);
        return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    }
    if (prompt || chat || json_path || embed) {
        if (!model || (!!prompt + !!chat + !!json_path + !!embed) != 1 || max_tokens < 1 ||
            max_tokens > 1000000) {
            cli_error("jobworker", "see jobworker --help",
                      "--prompt/--chat/--json/--embed need --model, one of the four, and --max-tokens 1..1000000");
            return CLI_EXIT_USAGE;
        }
        struct oneshot_opts o;
        memset(&o, 0, sizeof o);
        o.model_path = model;
        o.text = prompt ? prompt : chat ? chat : embed;
        o.chat = chat != NULL;
        o.embed = embed != NULL;
        o.json_path = json_path;
        o.max_tokens = max_tokens;
        if (parse_double("temperature", temperature, &o.has_temperature, &o.temperature) ||
            parse_double("top-p", top_p, &o.has_top_p, &o.top_p))
            return CLI_EXIT_USAGE;
        o.has_top_k = top_k != INT64_MIN;
        o.top_k = top_k;
        o.has_seed = seed != INT64_MIN;
        o.seed = seed;
        o.n = n_choices;
        for (size_t i = 0; i < n_stop; i++)
            o.stop[i] = stops[i];
        o.n_stop = n_stop;
        o.threads = (int)threads;
        o.n_ctx = (int)n_ctx;
        o.exact = exact;
        o.device = (int)dev;
        o.print_ids = print_ids;
        int rc = oneshot_run(&o, stdout, stderr, err, sizeof err);
        if (rc)
            cli_error("jobworker", NULL, "%s", err);
        return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    }
    if (jobd_url) {
        if (!model || threads < 0 || threads > 4096 || pack_size < 0 || pack_size > 4096 ||
            lease_seconds < 0 || lease_seconds > 86400 || max_batch_tokens < 0 ||
            max_batch_tokens > (1 << 20) || max_seqs < 0 || max_seqs > (1 << 16) || n_ctx < 0 ||
            n_ctx > (1 << 20)) {
            cli_error("jobworker", "see jobworker --help", "--jobd needs --model and sane sizes");
            return CLI_EXIT_USAGE;
        }
        const char *aliases[MAX_ALIASES];
        size_t n_aliases = collect_aliases(argc, argv, aliases);
        (void)alias;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        struct serve_opts wo;
        memset(&wo, 0, sizeof wo);
        wo.jobd_url = jobd_url;
        wo.token = worker_token;
        wo.model_path = model;
        wo.model_id = model_id;
        wo.aliases = aliases;
        wo.n_aliases = n_aliases;
        wo.name = name;
        wo.device = device;
        wo.threads = (int)threads;
        wo.pack_size = (int)pack_size;
        wo.lease_seconds = (int)lease_seconds;
        wo.drain_timeout_ms = drain_ms;
        wo.max_batch_tokens = (int)max_batch_tokens;
        wo.max_seqs = (int)max_seqs;
        wo.kv_mem_bytes = (size_t)kv_mem;
        wo.n_ctx = (int)n_ctx;
        wo.no_prefix_cache = no_prefix_cache;
        wo.swa_full = swa_full;
        wo.stop = &stop_flag;
        int rc = serve_run(&wo, err, sizeof err);
        if (rc)
            cli_error("jobworker", NULL, "%s", err);
        return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    }
    if (model) {
        cli_error("jobworker", "see jobworker --help",
                  "--model alone does nothing: add --jobd URL, --prompt/--chat, --batch-file or --inspect");
        return CLI_EXIT_USAGE;
    }
    cli_error("jobworker", "see jobworker --help", "nothing to do: give --jobd and --model, or --self-check");
    return CLI_EXIT_USAGE;
}
