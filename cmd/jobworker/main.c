/* jobworker - runs a model for jobd (see README and spec/worker-protocol.md).
 *
 * Today: option parsing, the device self-check, --inspect and the one-off
 * --prompt/--chat run (worker/oneshot.c). The engine (CPU engine
 * issue), the scheduler and jobd client (worker issue) plug in here. */
#include <stdio.h>
#include <string.h>

#include "common/cli.h"
#include "common/err.h"
#include "kernels/kn.h"
#include "worker/devcheck.h"
#include "worker/inspect.h"
#include "worker/batchrun.h"
#include "worker/oneshot.h"

static const char *usage_text =
    "usage: jobworker --jobd URL --model M.gguf [--device cpu|cuda] [--threads N]\n"
    "       jobworker --model M.gguf --prompt TEXT | --chat TEXT   (one-off run, no jobd)\n"
    "       jobworker --model M.gguf --batch-file requests.jsonl   (OpenAI batch lines -> output lines)\n"
    "       jobworker --self-check [--device cpu|cuda]\n"
    "       jobworker --model M.gguf --inspect   (print the model's metadata and tensor summary)\n"
    "\n"
    "Pulls leased requests from jobd and runs them through the engine.\n"
    "--self-check runs every kernel op on the device against a reference and\n"
    "prints the error and time of each (exit 0 when all are within tolerance).\n"
    "\n"
    "example: jobworker --self-check --device cuda\n"
    "\noptions:\n";

int main(int argc, char **argv)
{
    struct cli_log lg = {0};
    const char *jobd_url = NULL, *model = NULL, *device = "cpu", *prompt = NULL, *chat = NULL;
    int64_t threads = 0, max_tokens = 256;
    int self_check = 0, inspect = 0, help = 0, version = 0, print_ids = 0, no_prefix_cache = 0;
    const char *batch_file = NULL;
    uint64_t kv_mem = 0;
    int64_t max_batch_tokens = 0, max_seqs = 0, n_ctx = 0;
    struct cfg_opt opts[] = {
        {"jobd", "JOBD_URL", CFG_STR, &jobd_url, "URL", "jobd to pull work from"},
        {"model", "JOBWORKER_MODEL", CFG_STR, &model, "M.gguf", "the GGUF model to serve"},
        {"device", "JOBWORKER_DEVICE", CFG_STR, &device, "DEV", "cpu or cuda (default cpu)"},
        {"threads", "JOBWORKER_THREADS", CFG_INT, &threads, "N", "CPU threads (default: all cores)"},
        {"prompt", NULL, CFG_STR, &prompt, "TEXT", "one-off completion of TEXT"},
        {"chat", NULL, CFG_STR, &chat, "TEXT", "one-off chat reply to TEXT"},
        {"max-tokens", NULL, CFG_INT, &max_tokens, "N", "--prompt/--chat: tokens to generate (default 256)"},
        {"print-ids", NULL, CFG_BOOL, &print_ids, NULL, "--prompt/--chat: also print the token ids on stderr"},
        {"batch-file", NULL, CFG_STR, &batch_file, "FILE", "run an OpenAI batch input file, output lines on stdout"},
        {"kv-mem", "JOBWORKER_KV_MEM", CFG_SIZE, &kv_mem, "BYTES", "KV cache budget (default 256M)"},
        {"max-batch-tokens", NULL, CFG_INT, &max_batch_tokens, "N", "tokens per forward step (default 512)"},
        {"max-seqs", NULL, CFG_INT, &max_seqs, "N", "sequences running at once (default 64)"},
        {"ctx", NULL, CFG_INT, &n_ctx, "N", "context length (default: the model's, at most 4096)"},
        {"no-prefix-cache", NULL, CFG_BOOL, &no_prefix_cache, NULL, "never share KV blocks between requests"},
        {"self-check", NULL, CFG_BOOL, &self_check, NULL, "check the kernel ops on the device"},
        {"inspect", NULL, CFG_BOOL, &inspect, NULL, "print the model's metadata and tensor summary"},
        CLI_LOG_OPTS(&lg),
        {"help", NULL, CFG_BOOL, &help, NULL, "show this help"},
        {"version", NULL, CFG_BOOL, &version, NULL, "show the version"},
    };
    size_t n_opts = sizeof opts / sizeof opts[0];
    char err[256];
    int n_pos = 0;
    char *pos[1];
    if (cfg_parse(opts, n_opts, argc - 1, argv + 1, pos, 0, &n_pos, err, sizeof err)) {
        cli_error("jobworker", "see jobworker --help", "%s", err);
        return CLI_EXIT_USAGE;
    }
    if (help) {
        fputs(usage_text, stdout);
        cfg_usage(opts, n_opts, stdout);
        return CLI_EXIT_OK;
    }
    if (version) {
        cli_print_version("jobworker", stdout);
        return CLI_EXIT_OK;
    }
    if (cli_log_apply("jobworker", &lg))
        return CLI_EXIT_USAGE;
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
    if (batch_file) {
        if (!model || threads < 0 || threads > 4096 || max_batch_tokens < 0 ||
            max_batch_tokens > (1 << 20) || max_seqs < 0 || max_seqs > (1 << 16) || n_ctx < 0 ||
            n_ctx > (1 << 20)) {
            cli_error("jobworker", "see jobworker --help", "--batch-file needs --model and sane sizes");
            return CLI_EXIT_USAGE;
        }
        struct batchrun_opts bo = {model, batch_file, (int)threads, (int)max_batch_tokens,
                                   (int)max_seqs, (size_t)kv_mem, (int)n_ctx, no_prefix_cache};
        int rc = batchrun_file(&bo, stdout, stderr, err, sizeof err);
        if (rc)
            cli_error("jobworker", NULL, "%s", err);
        return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    }
    (void)threads;
    if (prompt || chat) {
        if (!model || (prompt && chat) || max_tokens < 1 || max_tokens > 1000000) {
            cli_error("jobworker", "see jobworker --help",
                      "--prompt/--chat need --model, one of the two, and --max-tokens 1..1000000");
            return CLI_EXIT_USAGE;
        }
        struct oneshot_opts o = {model, prompt ? prompt : chat, chat != NULL, (int)max_tokens,
                                 print_ids};
        int rc = oneshot_run(&o, stdout, stderr, err, sizeof err);
        if (rc)
            cli_error("jobworker", NULL, "%s", err);
        return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    }
    if (model || jobd_url) {
        cli_error("jobworker", "see README.md, feature status",
                  "serving jobd is not built yet; use --prompt/--chat for a one-off run");
        return CLI_EXIT_FAIL;
    }
    cli_error("jobworker", "see jobworker --help", "nothing to do: give --jobd and --model, or --self-check");
    return CLI_EXIT_USAGE;
}
