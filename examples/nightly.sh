#!/usr/bin/env bash
# examples/nightly.sh - a nightly batch pipeline for cron: submit, wait, fetch.
#
#   usage: nightly.sh REQUESTS.jsonl OUT_DIR
#   cron:  15 2 * * *  JOBD_URL=http://jobd:8080 JOBD_API_KEY=sk-... /opt/nightly.sh /data/today.jsonl /data/out
#
# Safe to run twice: jobctl submit derives its Idempotency-Key from the file's
# content and options, so a second run (a retry, a cron overlap) gets the same
# batch id back instead of a second batch (jobd keeps keys 24 h; the date in
# the metadata is part of the key, so the same file tomorrow is a new batch),
# then waits on it and rewrites the same output files. Files are written under a
# temporary name and renamed, so OUT_DIR never holds half a result.
#
# Exit status: 0 all done; 10 done but some requests failed (errors.jsonl has
# them, results.jsonl the rest); 11/12/13 the batch failed/expired/was
# cancelled (what finished is still fetched); 20/21 jobd unreachable / bad
# key; other non-zero: see the log. See `jobctl --help` for the table.
set -u -o pipefail

in=${1:?usage: nightly.sh REQUESTS.jsonl OUT_DIR}
out=${2:?usage: nightly.sh REQUESTS.jsonl OUT_DIR}
JOBCTL=${JOBCTL:-jobctl}
mkdir -p "$out"

log() { printf '%s nightly: %s\n' "$(date -u +%FT%TZ)" "$*" >&2; }

id=$("$JOBCTL" submit "$in" --metadata pipeline=nightly --metadata date="$(date -u +%F)")
rc=$?
if [ $rc -ne 0 ]; then
  log "submit failed (exit $rc)"
  exit $rc
fi
log "batch $id"
echo "$id" > "$out/batch_id"

"$JOBCTL" wait "$id" --interval "${NIGHTLY_INTERVAL:-30s}" --timeout 26h
rc=$?
case $rc in
  0)  log "completed" ;;
  10) log "completed with failed requests" ;;
  11) log "failed: the input was rejected"
      "$JOBCTL" errors "$id" -o "$out/errors.jsonl"
      exit $rc ;;
  12|13) log "ended early (exit $rc): fetching what finished" ;;
  *)  log "wait failed (exit $rc); run again to resume waiting on $id"
      exit $rc ;;
esac

"$JOBCTL" results "$id" -o "$out/results.jsonl" || exit $?
"$JOBCTL" errors "$id" -o "$out/errors.jsonl" || exit $?
log "results: $(wc -l < "$out/results.jsonl") lines, errors: $(wc -l < "$out/errors.jsonl") lines"
exit $rc
