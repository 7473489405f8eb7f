/* libFuzzer target: webhook URL checks (without DNS) and signing with a
 * hostile secret. The input is split at the first newline: the part before
 * is tried as a URL and as a secret, the rest is the body to sign.
 * fuzz-src: jobd/webhook/webhook.c */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "jobd/webhook/webhook.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    const uint8_t *nl = memchr(data, '\n', size);
    size_t head = nl ? (size_t)(nl - data) : size;
    char *s = malloc(head + 1);
    if (!s)
        return 0;
    memcpy(s, data, head);
    s[head] = '\0';
    char msg[300];
    int rc = webhook_url_check(s, 0, 0, msg, sizeof msg);
    if (rc != 0 && rc != ERR_INVAL && rc != ERR_NOMEM)
        abort(); /* without resolution only syntax errors are possible */
    if (rc == 0 && strlen(s) > STORE_WH_URL_MAX)
        abort();
    char sig[WEBHOOK_SIG_MAX];
    const uint8_t *body = nl ? nl + 1 : data + size;
    size_t body_len = (size_t)(data + size - body);
    if (webhook_sign(s, "evt_x", 1, body, body_len, sig) == 0 && (strncmp(sig, "v1,", 3) != 0 || strlen(sig) != 47))
        abort();
    free(s);
    return 0;
}
