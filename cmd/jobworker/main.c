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

#include "common/cfg.h"
#include "common/cli.h"
#include "common/err.h"
#include "kernels/kn.h"
#include "worker/devcheck.h"
#include "worker/inspect.h"
#include "worker/batchrun.h"
#include "worker/serve.h"
#include "worker/oneshot.h"
#include "worker/engine/model.h"

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

/* The command line, bound to the options of the modes: serve_opts also holds
 * the flags every mode shares (model, device, threads, context, scheduler). */
#define MAX_ALIASES 63
struct worker_flags {
    struct serve_opts so;         /* --jobd */
    struct oneshot_opts oo;       /* --prompt/--chat/--json/--embed; --exact, --print-ids */
    struct oneshot_bench_opts bo; /* --bench-decode, --bench-prompt */
    const char *aliases[MAX_ALIASES];
    struct cfg_str_list alias_list, stop_list;
    const char *prompt, *chat, *embed, *batch_file, *temperature, *top_p, *hourly_cost, *spec, *kv_type;
    int self_check, inspect, bench;
    struct cli_std std;
};

/* Defaults, then the environment and argv. -1 to go on, else the exit code. */
static int parse_flags(struct worker_flags *f, int argc, char **argv)
{
    struct serve_opts *s = &f->so;
    struct oneshot_opts *o = &f->oo;
    s->device = "cpu";
    s->drain_timeout_ms = 30000;
    s->aliases = f->aliases;
    f->alias_list = (struct cfg_str_list){f->aliases, MAX_ALIASES, &s->n_aliases};
    f->stop_list = (struct cfg_str_list){o->stop, STOP_MAX, &o->n_stop};
    o->max_tokens = 256;
    o->top_k = o->seed = INT64_MIN; /* not given */
    f->bo.n_decode = 128;
    f->bo.n_prompt_repeat = 6;
    struct cfg_opt opts[] = {
        CFG_OPT("jobd", "JOBD_URL", CFG_STR, &s->jobd_url, "URL", "jobd to pull work from"),
        CFG_OPT("model", "JOBWORKER_MODEL", CFG_STR, &s->model_path, "M.gguf", "the GGUF model to serve"),
        CFG_OPT("device", "JOBWORKER_DEVICE", CFG_STR, &s->device, "DEV", "cpu or cuda (default cpu)"),
        CFG_OPT("threads", "JOBWORKER_THREADS", CFG_INT, &s->threads, "N", "CPU threads (default: all cores)", 0, KN_POOL_MAX_THREADS),
        CFG_OPT("model-id", "JOBWORKER_MODEL_ID", CFG_STR, &s->model_id, "ID", "model name to register (default: the GGUF's general.name, else the file name)"),
        CFG_OPT("alias", NULL, CFG_STR_LIST, &f->alias_list, "A", "another name requests may use for the model (repeatable)"),
        CFG_OPT("worker-token", "JOBD_WORKER_TOKEN", CFG_STR, &s->token, "T", "jobd's worker token"),
        CFG_OPT("name", "JOBWORKER_NAME", CFG_STR, &s->name, "NAME", "worker name shown by jobd (default host/pid/device)"),
        CFG_OPT("hourly-cost", "JOBWORKER_HOURLY_COST", CFG_STR, &f->hourly_cost, "USD", "what this worker costs per hour (0..10000 US dollars, at most 6 decimals), told to jobd at registration for fleet cost (jobd --worker-costs may set it instead)"),
        CFG_OPT("pack-size", NULL, CFG_INT, &s->pack_size, "N", "requests per lease (default 64)", 0, 4096),
        CFG_OPT("lease-seconds", NULL, CFG_INT, &s->lease_seconds, "N", "lease length asked for; heartbeats every third (default 120)", 0, 86400),
        CFG_OPT("drain-timeout", NULL, CFG_DURATION, &s->drain_timeout_ms, "DUR", "on SIGTERM, running requests get this long (default 30s)"),
        CFG_OPT("prompt", NULL, CFG_STR, &f->prompt, "TEXT", "one-off completion of TEXT"),
        CFG_OPT("chat", NULL, CFG_STR, &f->chat, "TEXT", "one-off chat reply to TEXT"),
        CFG_OPT("embed", NULL, CFG_STR, &f->embed, "TEXT", "one-off embedding of TEXT (prints the /v1/embeddings response)"),
        CFG_OPT("json", NULL, CFG_STR, &o->json_path, "FILE", "one-off request: an OpenAI chat/completions body"),
        CFG_OPT("max-tokens", NULL, CFG_INT, &o->max_tokens, "N", "--prompt/--chat: tokens to generate (default 256)", 1, 1000000),
        CFG_OPT("batch-file", NULL, CFG_STR, &f->batch_file, "FILE", "run an OpenAI batch input file, output lines on stdout"),
        CFG_OPT("kv-mem", "JOBWORKER_KV_MEM", CFG_SIZE, &s->kv_mem_bytes, "BYTES", "KV cache budget (default 256M)"),
        CFG_OPT("max-batch-tokens", NULL, CFG_INT, &s->max_batch_tokens, "N", "tokens per forward step (default 512)", 0, 1 << 20),
        CFG_OPT("max-seqs", NULL, CFG_INT, &s->max_seqs, "N", "sequences running at once (default 64)", 0, 1 << 16),
        CFG_OPT("no-prefix-cache", NULL, CFG_BOOL, &s->no_prefix_cache, NULL, "never share KV blocks between requests"),
        CFG_OPT("swa-full", NULL, CFG_BOOL, &s->swa_full, NULL,
                "sliding-window layers keep every position (more KV memory; prefix caching for Gemma/Mistral)"),
        CFG_OPT("spec", "JOBWORKER_SPEC", CFG_STR, &f->spec, "off|auto",
                "prompt-lookup speculation while few sequences run: same output, fewer steps (default auto)"),
        CFG_OPT("spec-max-seqs", NULL, CFG_INT, &s->spec_max_seqs, "N",
                "speculate while at most N sequences run (default 2)", 1, 1 << 16),
        CFG_OPT("kv-type", "JOBWORKER_KV_TYPE", CFG_STR, &f->kv_type, "T",
                "K/V cache values: f16 (default), f32 (default with --exact), q8 (int8 with a scale per 32 values: 56% of f16's memory and reads; CPU only) or q8v (f16 keys, int8 values: 78%)"),
        CFG_OPT("temperature", NULL, CFG_STR, &f->temperature, "T", "--prompt/--chat: sampling temperature (default 1)"),
        CFG_OPT("top-p", NULL, CFG_STR, &f->top_p, "P", "--prompt/--chat: nucleus sampling mass (default 1)"),
        CFG_OPT("top-k", NULL, CFG_INT, &o->top_k, "K", "--prompt/--chat: sample among the K best (default off)"),
        CFG_OPT("seed", NULL, CFG_INT, &o->seed, "S", "--prompt/--chat: random seed (default random)"),
        CFG_OPT("n", NULL, CFG_INT, &o->n, "N", "--prompt/--chat: number of choices (default 1)"),
        CFG_OPT("stop", NULL, CFG_STR_LIST, &f->stop_list, "STR", "--prompt/--chat: stop string (repeatable, up to 4)"),
        CFG_OPT("ctx", NULL, CFG_INT, &s->n_ctx, "N", "context length (default: the model's, at most 4096)", 0, 1 << 20),
        CFG_OPT("exact", NULL, CFG_BOOL, &o->exact, NULL, "reference matmul (float dot products; slow)"),
        CFG_OPT("bench", NULL, CFG_BOOL, &f->bench, NULL, "print prompt-processing and decode tokens/s"),
        CFG_OPT("bench-decode", NULL, CFG_INT, &f->bo.n_decode, "N", "--bench: tokens to decode (default 128)", 1, 100000),
        CFG_OPT("bench-prompt", NULL, CFG_INT, &f->bo.n_prompt_repeat, "R", "--bench: the prompt sentence repeated R times (default 6: 61 tokens on SmolLM2)", 1, 1000),
        CFG_OPT("print-ids", NULL, CFG_BOOL, &o->print_ids, NULL, "--prompt/--chat/--json: also print the token ids on stderr"),
        CFG_OPT("self-check", NULL, CFG_BOOL, &f->self_check, NULL, "check the kernel ops on the device"),
        CFG_OPT("inspect", NULL, CFG_BOOL, &f->inspect, NULL, "print the model's metadata and tensor summary"),
        CLI_STD_OPTS(&f->std),
    };
    int n_pos = 0;
    char *pos[1];
    return cli_start("jobworker", usage_text, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 0,
                     &n_pos, &f->std);
}

/* The exit code of a mode: CLI_EXIT_OK, or CLI_EXIT_FAIL after printing err. */
static int mode_exit(int rc, const char *err)
{
    if (rc)
        cli_error("jobworker", NULL, "%s", err);
    return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

/* A mode that needs --model: CLI_EXIT_USAGE after saying so, else -1. */
static int need_model(const struct worker_flags *f, const char *what)
{
    if (f->so.model_path)
        return -1;
    cli_error("jobworker", "see jobworker --help", "%s needs --model M.gguf", what);
    return CLI_EXIT_USAGE;
}

/* --self-check [--device D] */
static int mode_self_check(enum kn_device dev)
{
    int rc = devcheck_run(dev, stdout);
    if (rc == ERR_NODEVICE)
        cli_error("jobworker", "check nvidia-smi and the driver", "--device cuda: no usable GPU");
    else if (rc)
        cli_error("jobworker", NULL, "self-check failed: %s", err_msg(rc));
    return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

/* --model M.gguf --inspect */
static int mode_inspect(const struct worker_flags *f)
{
    char err[512];
    int rc = need_model(f, "--inspect");
    if (rc >= 0)
        return rc;
    rc = inspect_model(f->so.model_path, stdout, err, sizeof err);
    if (rc)
        cli_error("jobworker", NULL, "cannot load model '%s': %s", f->so.model_path, err);
    return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

/* --model M.gguf --batch-file FILE */
static int mode_batch_file(const struct worker_flags *f, enum kn_device dev)
{
    const struct serve_opts *s = &f->so;
    char err[512];
    int rc = need_model(f, "--batch-file");
    if (rc >= 0)
        return rc;
    struct batchrun_opts bo = {s->model_path, f->batch_file, s->threads, s->max_batch_tokens,
                               s->max_seqs, s->kv_mem_bytes, s->n_ctx, s->no_prefix_cache,
                               f->oo.exact, (int)dev, s->swa_full, s->spec_off, s->spec_max_seqs, s->kv_type};
    return mode_exit(batchrun_file(&bo, stdout, stderr, err, sizeof err), err);
}

/* --model M.gguf --bench */
static int mode_bench(struct worker_flags *f, enum kn_device dev)
{
    char err[512];
    int rc = need_model(f, "--bench");
    if (rc >= 0)
        return rc;
    f->bo.model_path = f->so.model_path;
    f->bo.threads = f->so.threads;
    f->bo.exact = f->oo.exact;
    f->bo.device = (int)dev;
    f->bo.kv_type = f->so.kv_type;
    return mode_exit(oneshot_bench(&f->bo, stdout, err, sizeof err), err);
}

/* --model M.gguf --prompt TEXT | --chat TEXT | --json BODY | --embed TEXT */
static int mode_oneshot(struct worker_flags *f, enum kn_device dev)
{
    struct oneshot_opts *o = &f->oo;
    char err[512];
    if (!f->so.model_path || (!!f->prompt + !!f->chat + !!o->json_path + !!f->embed) != 1) {
        cli_error("jobworker", "see jobworker --help",
                  "--prompt/--chat/--json/--embed need --model and one of the four");
        return CLI_EXIT_USAGE;
    }
    if (parse_double("temperature", f->temperature, &o->has_temperature, &o->temperature) ||
        parse_double("top-p", f->top_p, &o->has_top_p, &o->top_p))
        return CLI_EXIT_USAGE;
    o->model_path = f->so.model_path;
    o->text = f->prompt ? f->prompt : f->chat ? f->chat : f->embed;
    o->chat = f->chat != NULL;
    o->embed = f->embed != NULL;
    o->has_top_k = o->top_k != INT64_MIN;
    o->has_seed = o->seed != INT64_MIN;
    o->threads = f->so.threads;
    o->n_ctx = f->so.n_ctx;
    o->device = (int)dev;
    o->kv_type = f->so.kv_type;
    return mode_exit(oneshot_run(o, stdout, stderr, err, sizeof err), err);
}

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* --jobd URL --model M.gguf: serve until SIGTERM, then drain. */
static int mode_serve(struct worker_flags *f)
{
    char err[512];
    int rc = need_model(f, "--jobd");
    if (rc >= 0)
        return rc;
    if (f->hourly_cost && cfg_parse_micros(f->hourly_cost, 10000LL * 1000000, &f->so.hourly_cost_micros)) {
        cli_error("jobworker", "give US dollars per hour, e.g. --hourly-cost 2.50",
                  "--hourly-cost '%s' is not a price of 0..10000 with at most 6 decimals", f->hourly_cost);
        return CLI_EXIT_USAGE;
    }
    f->so.hourly_cost_declared = f->hourly_cost != NULL;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    f->so.stop = &stop_flag;
    return mode_exit(serve_run(&f->so, err, sizeof err), err);
}

/* --spec off|auto. -1 to go on, else the exit code. */
static int parse_spec(struct worker_flags *f)
{
    if (!f->spec || strcmp(f->spec, "auto") == 0)
        return -1;
    if (strcmp(f->spec, "off") == 0) {
        f->so.spec_off = 1;
        return -1;
    }
    cli_error("jobworker", "use --spec off or --spec auto", "unknown --spec '%s'", f->spec);
    return CLI_EXIT_USAGE;
}

/* --device: the kernels' device, built in. -1 to go on, else the exit code. */
static int parse_device(const char *device, enum kn_device *dev)
{
    if (kn_device_parse(device, dev)) {
        cli_error("jobworker", "use --device cpu or --device cuda", "unknown device '%s'", device);
        return CLI_EXIT_USAGE;
    }
    if (*dev == KN_DEVICE_CUDA && !kn_cuda_built()) {
        cli_error("jobworker", "rebuild with 'make CUDA=1' on a machine with the CUDA Toolkit",
                  "--device cuda: this build has no CUDA backend");
        return CLI_EXIT_FAIL;
    }
    return -1;
}

/* --kv-type into so->kv_type. -1 to go on, else the exit code. */
static int parse_kv_type(const char *s, struct serve_opts *so)
{
    if (s && model_kv_type_parse(s, &so->kv_type)) {
        cli_error("jobworker", "use --kv-type f16, f32, q8 or q8v", "unknown K/V type '%s'", s);
        return CLI_EXIT_USAGE;
    }
    return -1;
}

int main(int argc, char **argv)
{
    struct worker_flags f;
    memset(&f, 0, sizeof f);
    enum kn_device dev;
    int rc = parse_flags(&f, argc, argv);
    if (rc < 0)
        rc = parse_spec(&f);
    if (rc < 0)
        rc = parse_device(f.so.device, &dev);
    if (rc < 0)
        rc = parse_kv_type(f.kv_type, &f.so);
    if (rc >= 0)
        return rc;
    if (f.self_check)
        return mode_self_check(dev);
    if (f.inspect)
        return mode_inspect(&f);
    if (f.batch_file)
        return mode_batch_file(&f, dev);
    if (f.bench)
        return mode_bench(&f, dev);
    if (f.prompt || f.chat || f.oo.json_path || f.embed)
        return mode_oneshot(&f, dev);
    if (f.so.jobd_url)
        return mode_serve(&f);
    if (f.so.model_path) {
        cli_error("jobworker", "see jobworker --help",
                  "--model alone does nothing: add --jobd URL, --prompt/--chat, --batch-file or --inspect");
        return CLI_EXIT_USAGE;
    }
    cli_error("jobworker", "see jobworker --help", "nothing to do: give --jobd and --model, or --self-check");
    return CLI_EXIT_USAGE;
}
