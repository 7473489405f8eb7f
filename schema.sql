-- schema.sql - jobd's SQLite schema: the single source of truth.
--
-- Embedded into jobd at build time and applied at start. Conventions every
-- table here follows:
--   * a comment on every table and column: meaning, unit, invariants;
--   * times are integer seconds since the Unix epoch (UTC) unless the column
--     name ends in _ms; sizes are bytes; token counts are tokens;
--   * ids are the prefixed, time-sortable strings of common/id.h
--     ("batch_...", "file-...", "req_..."), so ORDER BY id is creation order;
--   * migrations are numbered by PRAGMA user_version: the block for version N
--     runs once, in one transaction, when the database is at N-1.
--
-- The runner (jobd/store/store.c) splits this file at lines "-- @migration N":
-- everything before the first marker is this comment; block N holds the DDL
-- that moves a database from user_version N-1 to N. Blocks are append-only:
-- never edit a released block, add block N+1 below the last one instead (and
-- update the comments of the tables it changes so this file keeps describing
-- the current schema). A database whose user_version is newer than the last
-- block is refused (no silent downgrade).
--
-- Tables are STRICT (column types enforced) and foreign keys are on
-- (PRAGMA foreign_keys=ON on every connection).

-- @migration 1

-- A tenant: the unit of isolation. Every other object belongs to exactly one
-- tenant, and every query the API makes carries the tenant of the
-- authenticated key (never one taken from the request).
CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,          -- "ten_..." (common/id.h)
    name        TEXT NOT NULL UNIQUE,      -- operator-chosen name, 1..64 bytes of [A-Za-z0-9._-]
    created_at  INTEGER NOT NULL           -- unix seconds
) STRICT;

-- API keys. The plaintext ("sk-jobd-<key id>_<secret>") is shown once at
-- creation and never stored: only the SHA-256 of the secret is kept (keys
-- carry 240 random bits, so a fast hash is adequate). Lookup is by key id,
-- then the hash is compared in constant time.
CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,         -- key id: 10 lowercase Crockford base32 chars, public (shown in lists)
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),  -- owner; requests with this key act as this tenant
    secret_hash  BLOB NOT NULL CHECK (length(secret_hash) = 32),  -- SHA-256 of the secret part
    created_at   INTEGER NOT NULL,         -- unix seconds
    revoked_at   INTEGER                   -- unix seconds; NULL while the key is valid. Revocation is final
) STRICT;
CREATE INDEX api_keys_tenant ON api_keys(tenant_id, created_at);

-- Uploaded and generated files. The bytes live under the data directory at
-- storage_path; this row is the metadata. Deleting a file deletes the row
-- (batches keep the id as plain text, so they are not FK-bound to files).
CREATE TABLE files (
    id            TEXT PRIMARY KEY,        -- "file-..."
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),  -- owner
    purpose       TEXT NOT NULL CHECK (purpose IN ('batch', 'batch_output')),  -- OpenAI purpose
    filename      TEXT NOT NULL,           -- client-supplied name, display only, never used as a path
    bytes         INTEGER NOT NULL CHECK (bytes >= 0),  -- logical (uncompressed) size in bytes
    sha256        TEXT NOT NULL,           -- lowercase hex SHA-256 of the logical content (64 chars)
    storage_path  TEXT NOT NULL,           -- path of the stored bytes, relative to the data directory; server-generated
    encoding      TEXT NOT NULL DEFAULT 'identity' CHECK (encoding IN ('identity', 'zstd')),  -- how the stored bytes are encoded
    status        TEXT NOT NULL DEFAULT 'processed' CHECK (status IN ('uploaded', 'processed', 'error')),  -- OpenAI's (deprecated) file status
    created_at    INTEGER NOT NULL,        -- unix seconds
    expires_at    INTEGER                  -- unix seconds after which the file may be purged; NULL = kept until deleted
) STRICT;
CREATE INDEX files_tenant ON files(tenant_id, id);

-- Batches (OpenAI batch objects). status follows the state machine in
-- jobd/store/store.h (store_batch_transition is the only writer of status); each
-- *_at column is set when the batch enters that state.
CREATE TABLE batches (
    id                   TEXT PRIMARY KEY,  -- "batch_..."
    tenant_id            TEXT NOT NULL REFERENCES tenants(id),  -- owner
    endpoint             TEXT NOT NULL CHECK (endpoint IN ('/v1/chat/completions', '/v1/completions')),  -- every line's url must equal it
    input_file_id        TEXT NOT NULL,     -- files.id of the JSONL input (plain text: the file may be deleted later)
    completion_window_s  INTEGER NOT NULL CHECK (completion_window_s > 0),  -- seconds ("24h" = 86400)
    status               TEXT NOT NULL CHECK (status IN ('validating', 'failed', 'in_progress', 'finalizing',
                                                      'completed', 'expired', 'cancelling', 'cancelled')),
    model                TEXT,              -- the one model every line names, or 'mixed' when lines name several (see
                                            -- batch_models, migration 5); set by ingest (checkpointed), NULL before
    metadata             TEXT,              -- JSON object of up to 16 string pairs (key <= 64, value <= 512 bytes), or NULL
    errors               TEXT,              -- JSON array of {code,line,message,param} (<= 100), or NULL; final once status is failed
    output_file_id       TEXT,              -- files.id of the success lines, set at finalization
    error_file_id        TEXT,              -- files.id of the failure lines, set at finalization
    n_total              INTEGER NOT NULL DEFAULT 0,  -- request_counts.total: requests persisted (set on entering in_progress)
    n_completed          INTEGER NOT NULL DEFAULT 0,  -- request_counts.completed: requests in state succeeded
    n_failed             INTEGER NOT NULL DEFAULT 0,  -- request_counts.failed: requests in state failed
    ingest_line          INTEGER NOT NULL DEFAULT 0,  -- ingest checkpoint: input lines 1..ingest_line are validated and their requests committed
    ingest_requests      INTEGER NOT NULL DEFAULT 0,  -- requests committed by ingest so far (= n_total once in_progress)
    created_at           INTEGER NOT NULL,  -- unix seconds
    expires_at           INTEGER NOT NULL,  -- created_at + completion_window_s
    in_progress_at       INTEGER,           -- unix seconds of entering in_progress, else NULL
    finalizing_at        INTEGER,           -- ... finalizing
    completed_at         INTEGER,           -- ... completed
    failed_at            INTEGER,           -- ... failed
    expired_at           INTEGER,           -- ... expired
    cancelling_at        INTEGER,           -- ... cancelling
    cancelled_at         INTEGER,           -- ... cancelled
    priority             INTEGER NOT NULL DEFAULT 0,  -- metadata "priority" (string of an integer -1000..1000, default 0): orders a
                                            -- tenant's own batches for leasing (higher first); never ranks one tenant over another
    usage_prompt_tokens      INTEGER NOT NULL DEFAULT 0,  -- usage.input_tokens: sum over the batch's results, set at finalization
    usage_completion_tokens  INTEGER NOT NULL DEFAULT 0,  -- usage.output_tokens: idem
    usage_cached_tokens      INTEGER NOT NULL DEFAULT 0,  -- usage.input_tokens_details.cached_tokens: idem
    CHECK (n_completed + n_failed <= n_total OR status = 'validating')
) STRICT;
CREATE INDEX batches_tenant ON batches(tenant_id, id);
CREATE INDEX batches_status ON batches(status, id);

-- Workers: inference processes registered with jobd (spec/worker-protocol.md).
-- A worker re-registers after a restart and gets a new id; old rows simply
-- stop being seen. "Served" means last_seen within the worker TTL.
-- Migration 8 adds hourly_cost_micros (its price per registered hour).
CREATE TABLE workers (
    id             TEXT PRIMARY KEY,       -- "wrk_..."
    name           TEXT NOT NULL,          -- self-reported name (host/pid/gpu), 1..128 bytes, display only
    device         TEXT NOT NULL,          -- self-reported device ("cpu", "cuda:0 H200"...), <= 128 bytes
    kv_tokens      INTEGER NOT NULL DEFAULT 0,  -- capacity hint: KV cache size in tokens (0 = unknown)
    pack_size      INTEGER NOT NULL DEFAULT 0,  -- capacity hint: preferred requests per lease (0 = unknown)
    tokens_per_s   REAL NOT NULL DEFAULT 0,     -- last reported generation throughput (tokens/s), from heartbeats
    registered_at  INTEGER NOT NULL,       -- unix seconds
    last_seen      INTEGER NOT NULL        -- unix seconds of the last register/lease/heartbeat/results call
) STRICT;
CREATE INDEX workers_seen ON workers(last_seen);

-- The model names a worker answers to: for each model it loaded, the
-- canonical name and every alias (a request's body.model must equal one).
CREATE TABLE worker_models (
    worker_id  TEXT NOT NULL REFERENCES workers(id) ON DELETE CASCADE,  -- the worker
    canonical  TEXT NOT NULL,              -- the model's canonical name (what a lease asks for)
    name       TEXT NOT NULL,              -- canonical or alias, 1..128 bytes
    PRIMARY KEY (worker_id, canonical, name)
) STRICT, WITHOUT ROWID;
CREATE INDEX worker_models_name ON worker_models(name);

-- Fair leasing state: per model (a body.model value), the tenant served
-- last, so the next lease starts its round-robin with the tenant after it.
CREATE TABLE lease_rr (
    model           TEXT PRIMARY KEY,      -- body.model value
    last_tenant_id  TEXT NOT NULL          -- tenants.id served last (plain text: the cursor only compares ids)
) STRICT;

-- Leases: a worker's claim on a pack of requests, renewed by heartbeats.
-- A request in state leased names its lease; when expires_at passes the
-- sweeper returns the lease's requests to queued.
CREATE TABLE leases (
    id          TEXT PRIMARY KEY,          -- "lease_..."
    worker_id   TEXT NOT NULL,             -- workers.id of the holder (plain text: worker rows may be purged)
    model       TEXT NOT NULL,             -- the canonical model the worker asked for; leased requests name it or an alias
    n_requests  INTEGER NOT NULL DEFAULT 0,  -- requests handed out in this lease
    created_at  INTEGER NOT NULL,          -- unix seconds
    expires_at  INTEGER NOT NULL,          -- unix seconds; heartbeats move it forward
    released_at INTEGER                    -- unix seconds the lease ended (all results in, expired or given back), else NULL
) STRICT;
CREATE INDEX leases_expiry ON leases(expires_at) WHERE released_at IS NULL;

-- Requests: one row per input line of a validated batch. status follows the
-- state machine in jobd/store/store.h (store_request_transition is the only writer
-- of status). Rows of a batch still in 'validating' are not visible to work
-- distribution (it only leases requests whose batch is in_progress).
CREATE TABLE requests (
    id                 TEXT PRIMARY KEY,   -- "req_..."; also the id of its output line
    batch_id           TEXT NOT NULL REFERENCES batches(id) ON DELETE CASCADE,  -- owning batch
    tenant_id          TEXT NOT NULL,      -- = batches.tenant_id (denormalised for tenant-scoped queries)
    line               INTEGER NOT NULL CHECK (line >= 1),  -- 1-based line number in the input file
    custom_id          TEXT NOT NULL,      -- caller's id, unique within the batch
    model              TEXT NOT NULL,      -- body.model
    body               TEXT NOT NULL,      -- the line's body JSON text exactly as sent (what the worker runs)
    status             TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'leased', 'succeeded', 'failed')),
    attempts           INTEGER NOT NULL DEFAULT 0,  -- times the request was leased (incremented on queued -> leased)
    next_attempt_at    INTEGER NOT NULL DEFAULT 0,  -- unix seconds; a queued request is not leased before this (retry backoff)
    lease_id           TEXT,               -- leases.id while status = leased, else NULL
    prompt_tokens_est  INTEGER NOT NULL DEFAULT 0,  -- tokens, estimated at ingest as prompt bytes / 4 (for packing and quotas)
    max_tokens         INTEGER NOT NULL DEFAULT 0,  -- output token cap: max_completion_tokens / max_tokens, or the model limit
    last_error         TEXT,               -- last failure message (retry or terminal), NULL if none
    created_at         INTEGER NOT NULL,   -- unix seconds
    updated_at         INTEGER NOT NULL,   -- unix seconds of the last status change
    finished_at        INTEGER,            -- unix seconds of entering succeeded/failed, else NULL
    UNIQUE (batch_id, custom_id),
    CHECK ((status = 'leased') = (lease_id IS NOT NULL))
) STRICT;
-- Leasing reads a batch's ready requests in (next_attempt_at, rowid) order:
-- fresh requests (0) in line order, then retries as they come due.
CREATE INDEX requests_ready ON requests(batch_id, next_attempt_at) WHERE status = 'queued';
-- Cancellation and finalization ask "does this batch still have leased requests?"
CREATE INDEX requests_leased ON requests(batch_id) WHERE status = 'leased';
CREATE INDEX requests_lease ON requests(lease_id) WHERE lease_id IS NOT NULL;

-- Idempotency keys (Idempotency-Key header on POSTs), per tenant. A row with
-- status_code NULL is a reservation in flight; completing it stores the
-- response in the same transaction as the effect, so a retry either replays
-- the committed response or finds no trace of the effect.
CREATE TABLE idempotency_keys (
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),  -- keys are scoped per tenant
    key          TEXT NOT NULL,            -- client's key, 1..255 bytes
    fingerprint  BLOB NOT NULL CHECK (length(fingerprint) = 32),  -- SHA-256 of method, path and body of the first request
    status_code  INTEGER,                  -- HTTP status of the stored response; NULL while in flight
    response     BLOB,                     -- response body replayed on retries; NULL while in flight
    created_at   INTEGER NOT NULL,         -- unix seconds of the reservation (retention counts from here)
    completed_at INTEGER,                  -- unix seconds the response was stored
    PRIMARY KEY (tenant_id, key)
) STRICT, WITHOUT ROWID;
CREATE INDEX idempotency_keys_age ON idempotency_keys(created_at);

-- Dead letters: requests that exhausted their attempts. The request itself
-- is in state failed (with a results row carrying error max_attempts_exceeded);
-- this row keeps why, and the original input line for inspection or
-- resubmission. A retry (allowed while the batch is in_progress) deletes the
-- row, its results row, and requeues the request with attempts reset.
CREATE TABLE dead_letters (
    request_id  TEXT PRIMARY KEY REFERENCES requests(id) ON DELETE CASCADE,  -- the failed request
    batch_id    TEXT NOT NULL,             -- its batch (denormalised for the error file)
    tenant_id   TEXT NOT NULL,             -- owner of the batch (tenant-scoped listing)
    custom_id   TEXT NOT NULL,             -- the request's custom_id
    attempts    INTEGER NOT NULL,          -- attempts made before giving up
    reason      TEXT NOT NULL,             -- machine code: 'worker_error' (transient errors) or 'lease_expired' (last attempt's lease lapsed)
    last_error  TEXT,                      -- last error message seen, if any
    line        TEXT NOT NULL,             -- the original input line, rebuilt: {"custom_id","method","url","body"}
    created_at  INTEGER NOT NULL           -- unix seconds
) STRICT;
CREATE INDEX dead_letters_batch ON dead_letters(batch_id, request_id);
CREATE INDEX dead_letters_tenant ON dead_letters(tenant_id, request_id);

-- Results: the outcome of each request, written exactly once (the primary
-- key is the request id: a second commit for the same request is refused).
CREATE TABLE results (
    request_id         TEXT PRIMARY KEY REFERENCES requests(id) ON DELETE CASCADE,  -- exactly one result per request
    batch_id           TEXT NOT NULL,      -- its batch (finalization scans by batch)
    lease_id           TEXT,               -- lease under which it was produced (fencing audit)
    status_code        INTEGER,            -- HTTP-like status of the response (200, 400...); NULL for non-HTTP errors
    body               BLOB,               -- response body JSON (may be zstd-compressed: see encoding), NULL if none
    encoding           TEXT NOT NULL DEFAULT 'identity' CHECK (encoding IN ('identity', 'zstd')),  -- encoding of body
    error_code         TEXT,               -- output line error.code for non-HTTP failures, else NULL
    error_message      TEXT,               -- output line error.message, else NULL
    prompt_tokens      INTEGER NOT NULL DEFAULT 0,  -- tokens actually read
    completion_tokens  INTEGER NOT NULL DEFAULT 0,  -- tokens generated
    cached_tokens      INTEGER NOT NULL DEFAULT 0,  -- prompt tokens served from a shared prefix (subset of prompt_tokens)
    queue_ms           INTEGER NOT NULL DEFAULT 0,  -- worker-side wait between lease and start of prefill, ms
    prefill_ms         INTEGER NOT NULL DEFAULT 0,  -- wall time of its prefill, ms
    decode_ms          INTEGER NOT NULL DEFAULT 0,  -- wall time of its decode, ms
    gpu_ms             INTEGER NOT NULL DEFAULT 0,  -- milliseconds of device time the worker attributes to it
    created_at         INTEGER NOT NULL    -- unix seconds
) STRICT;
CREATE INDEX results_batch ON results(batch_id);
-- Heartbeats report requests of a lease that were ended under it by a cancel or expiry.
CREATE INDEX results_lease_stop ON results(lease_id) WHERE error_code IN ('batch_cancelled', 'batch_expired');

-- Webhook endpoints registered by tenants.
CREATE TABLE webhook_endpoints (
    id           TEXT PRIMARY KEY,         -- "whep_..."
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),  -- owner
    url          TEXT NOT NULL,            -- https URL events are POSTed to (SSRF-checked at registration and delivery)
    secret       TEXT NOT NULL,            -- "whsec_<base64>" signing secret (Standard Webhooks)
    event_types  TEXT NOT NULL DEFAULT '*',  -- comma-separated event types ("batch.completed,...") or "*"
    created_at   INTEGER NOT NULL,         -- unix seconds
    disabled_at  INTEGER                   -- unix seconds; NULL = active (410 Gone or persistent failure disables)
) STRICT;
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints(tenant_id);

-- Webhook events: the transactional outbox. An event row is inserted in the
-- same transaction as the state change it reports (e.g. a batch entering
-- completed); the dispatcher fans it out into deliveries.
CREATE TABLE webhook_events (
    id          TEXT PRIMARY KEY,          -- "evt_..."; also the webhook-id header (dedupe key for receivers)
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),  -- whose endpoints receive it
    type        TEXT NOT NULL,             -- "batch.completed", "batch.failed", "batch.expired", "batch.cancelled"
    object_id   TEXT NOT NULL,             -- id of the object the event is about (data.id)
    payload     TEXT NOT NULL,             -- exact JSON body to send
    created_at  INTEGER NOT NULL,          -- unix seconds
    fanned_out  INTEGER NOT NULL DEFAULT 0 CHECK (fanned_out IN (0, 1))  -- 1 once deliveries rows exist for every endpoint
) STRICT;
CREATE INDEX webhook_events_pending ON webhook_events(id) WHERE fanned_out = 0;

-- Webhook deliveries: one event to one endpoint, retried with backoff.
CREATE TABLE webhook_deliveries (
    id               INTEGER PRIMARY KEY,  -- row id
    event_id         TEXT NOT NULL REFERENCES webhook_events(id) ON DELETE CASCADE,
    endpoint_id      TEXT NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
    status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),  -- failed = gave up
    attempts         INTEGER NOT NULL DEFAULT 0,  -- POSTs made
    next_attempt_at  INTEGER NOT NULL,     -- unix seconds of the next POST while pending
    last_status      INTEGER,              -- HTTP status of the last attempt, NULL if it got no response
    last_error       TEXT,                 -- transport error or response excerpt of the last attempt
    delivered_at     INTEGER,              -- unix seconds of the 2xx, else NULL
    UNIQUE (event_id, endpoint_id)
) STRICT;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_at) WHERE status = 'pending';

-- Usage ledger: one row per request that consumed compute, written in the
-- same transaction as its result. Append-only; usage reports sum it.
CREATE TABLE usage_ledger (
    id                 INTEGER PRIMARY KEY,  -- row id (append order)
    tenant_id          TEXT NOT NULL REFERENCES tenants(id),  -- who is billed
    batch_id           TEXT NOT NULL,      -- batch of the request
    request_id         TEXT NOT NULL UNIQUE,  -- at most one charge per request
    model              TEXT NOT NULL,      -- model that served it
    prompt_tokens      INTEGER NOT NULL CHECK (prompt_tokens >= 0),      -- tokens
    completion_tokens  INTEGER NOT NULL CHECK (completion_tokens >= 0),  -- tokens
    cached_tokens      INTEGER NOT NULL DEFAULT 0 CHECK (cached_tokens >= 0),  -- tokens (part of prompt_tokens)
    cost_micros        INTEGER NOT NULL CHECK (cost_micros >= 0),        -- cost in millionths of the currency unit
    created_at         INTEGER NOT NULL    -- unix seconds
) STRICT;
CREATE INDEX usage_ledger_tenant ON usage_ledger(tenant_id, created_at);

-- @migration 2
-- Webhooks (spec/webhooks.md). Endpoints gain a kind, a visible reason when
-- disabled and the start of their current failure streak; deliveries keep
-- the last attempt's latency; every attempt is logged; each tenant has one
-- default signing secret for per-batch URLs (metadata.webhook_url).
--
-- webhook_endpoints now also has:
--   kind            'endpoint' (registered with POST /v1/webhook_endpoints, signed with its own
--                   secret) or 'batch_url' (created by the dispatcher for a batch's
--                   metadata.webhook_url, signed with the tenant's default secret; secret = '')
--   disabled_reason why disabled_at is set ("410 Gone", "failing since ...: ..."), else NULL
--   failing_since   unix seconds of the first failed attempt since the last success, else NULL
--                   (an endpoint failing for the configured period is disabled)
-- webhook_deliveries now also has:
--   created_at      unix seconds the delivery was created (fan-out, test event or redelivery)
--   last_attempt_at unix seconds of the last attempt's start, NULL before the first
--   last_latency_ms milliseconds from connect start to the response of the last attempt, NULL before
ALTER TABLE webhook_endpoints ADD COLUMN kind TEXT NOT NULL DEFAULT 'endpoint' CHECK (kind IN ('endpoint', 'batch_url'));
ALTER TABLE webhook_endpoints ADD COLUMN disabled_reason TEXT;
ALTER TABLE webhook_endpoints ADD COLUMN failing_since INTEGER;
ALTER TABLE webhook_deliveries ADD COLUMN created_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_deliveries ADD COLUMN last_attempt_at INTEGER;
ALTER TABLE webhook_deliveries ADD COLUMN last_latency_ms INTEGER;
CREATE INDEX webhook_endpoints_url ON webhook_endpoints(tenant_id, kind, url);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries(endpoint_id, id);

-- The tenant's default signing secret: signs deliveries to per-batch URLs
-- (metadata.webhook_url). Created on first use (the first such delivery, or
-- GET /v1/webhook_secret), never changes.
CREATE TABLE webhook_tenant_secrets (
    tenant_id   TEXT PRIMARY KEY REFERENCES tenants(id),  -- owner
    secret      TEXT NOT NULL,             -- "whsec_<base64 of 32 random bytes>"
    created_at  INTEGER NOT NULL           -- unix seconds
) STRICT;

-- One row per delivery attempt (the delivery log). Deleted with the delivery.
CREATE TABLE webhook_attempts (
    id           INTEGER PRIMARY KEY,      -- row id (attempt order)
    delivery_id  INTEGER NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,         -- 1-based attempt number of the delivery (webhook_deliveries.attempts then)
    started_at   INTEGER NOT NULL,         -- unix seconds the POST started
    status_code  INTEGER,                  -- HTTP status, NULL when no response arrived
    latency_ms   INTEGER NOT NULL,         -- ms until the response (or the failure)
    outcome      TEXT NOT NULL CHECK (outcome IN ('delivered', 'retry', 'failed', 'disabled', 'blocked')),  -- what the attempt led to
    error        TEXT                      -- transport error or response excerpt (<= 256 bytes), NULL on success
) STRICT;
CREATE INDEX webhook_attempts_delivery ON webhook_attempts(delivery_id, id);

-- @migration 3
-- Cost accounting (spec/usage.md). usage_ledger.cost_micros is now priced
-- from the configured table when a result commits; a batch keeps the sum of
-- its ledger rows' cost, set at finalization with the token sums; reports by
-- batch read the ledger through its batch index.
--
-- batches now also has:
--   usage_cost_micros  sum of cost_micros of the batch's usage_ledger rows, set at finalization
ALTER TABLE batches ADD COLUMN usage_cost_micros INTEGER NOT NULL DEFAULT 0;
CREATE INDEX usage_ledger_batch ON usage_ledger(batch_id);

-- @migration 4
-- Budgets and admission (spec/usage.md "Budgets"). A tenant may have limits;
-- a submission made while it has any is estimated before its batch row
-- exists (a scan of the input file) and admitted only if it fits, and the
-- batch then holds a reservation: estimated tokens and cost of its
-- unfinished requests. Triggers keep the reservation exact as requests
-- finish (released per request, in the transaction of the status change),
-- come back (a dead letter retried) or the batch ends (released in full).
-- Actual spend is the usage_ledger; usage_totals keeps its running sums per
-- tenant and model for /metrics.
--
-- batches now also has:
--   budgeted          1 if admitted under limits (holds a reservation), else 0 (never reserved)
--   reserved_tokens   tokens: sum of (prompt_tokens_est + max_tokens) of its requests not yet
--                     succeeded/failed; 0 once the batch is completed/failed/expired/cancelled
--   reserved_micros   micro-dollars: sum over the same requests of their estimated cost
--                     (prompt_tokens_est as uncached input, max_tokens as output, priced with
--                     reserve_price_in/out, rounded half up per request); 0 once terminal
--   reserve_price_in  micro-dollars per 1M input tokens of the batch's model at admission
--   reserve_price_out micro-dollars per 1M output tokens, idem (the release uses these
--                     snapshots, so a price change never leaves a reservation behind)
ALTER TABLE batches ADD COLUMN budgeted INTEGER NOT NULL DEFAULT 0 CHECK (budgeted IN (0, 1));
ALTER TABLE batches ADD COLUMN reserved_tokens INTEGER NOT NULL DEFAULT 0 CHECK (reserved_tokens >= 0);
ALTER TABLE batches ADD COLUMN reserved_micros INTEGER NOT NULL DEFAULT 0 CHECK (reserved_micros >= 0);
ALTER TABLE batches ADD COLUMN reserve_price_in INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN reserve_price_out INTEGER NOT NULL DEFAULT 0;
CREATE INDEX batches_reserved ON batches(tenant_id) WHERE reserved_tokens > 0 OR reserved_micros > 0;

-- Per-tenant limits (PUT /v1/admin/tenants/{name}/limits). A NULL limit is
-- no limit; a tenant without a row has none.
CREATE TABLE tenant_limits (
    tenant_id           TEXT PRIMARY KEY REFERENCES tenants(id),  -- the tenant
    max_queued_tokens   INTEGER CHECK (max_queued_tokens >= 0),   -- tokens: cap on the reserved_tokens of its batches
    max_daily_micros    INTEGER CHECK (max_daily_micros >= 0),    -- micro-dollars: cap on ledger cost of the UTC day + reservations
    max_monthly_micros  INTEGER CHECK (max_monthly_micros >= 0),  -- micro-dollars: idem for the UTC calendar month
    updated_at          INTEGER NOT NULL                          -- unix seconds
) STRICT;

-- A request finishing (queued/leased -> succeeded/failed) releases its share.
CREATE TRIGGER requests_reserve_release AFTER UPDATE OF status ON requests
WHEN OLD.status IN ('queued', 'leased') AND NEW.status IN ('succeeded', 'failed')
BEGIN
    UPDATE batches SET
        reserved_tokens = max(0, reserved_tokens - (NEW.prompt_tokens_est + NEW.max_tokens)),
        reserved_micros = max(0, reserved_micros - (
            (NEW.prompt_tokens_est / 1000000) * reserve_price_in + (NEW.max_tokens / 1000000) * reserve_price_out +
            ((NEW.prompt_tokens_est % 1000000) * reserve_price_in + (NEW.max_tokens % 1000000) * reserve_price_out
             + 500000) / 1000000))
    WHERE id = NEW.batch_id AND budgeted = 1
      AND status NOT IN ('completed', 'failed', 'expired', 'cancelled');
END;

-- A finished request coming back (dead letter retry: failed -> queued) reserves again.
CREATE TRIGGER requests_reserve_again AFTER UPDATE OF status ON requests
WHEN OLD.status IN ('succeeded', 'failed') AND NEW.status IN ('queued', 'leased')
BEGIN
    UPDATE batches SET
        reserved_tokens = reserved_tokens + (NEW.prompt_tokens_est + NEW.max_tokens),
        reserved_micros = reserved_micros + (
            (NEW.prompt_tokens_est / 1000000) * reserve_price_in + (NEW.max_tokens / 1000000) * reserve_price_out +
            ((NEW.prompt_tokens_est % 1000000) * reserve_price_in + (NEW.max_tokens % 1000000) * reserve_price_out
             + 500000) / 1000000)
    WHERE id = NEW.batch_id AND budgeted = 1
      AND status NOT IN ('completed', 'failed', 'expired', 'cancelled');
END;

-- A batch reaching a terminal state releases whatever it still holds.
CREATE TRIGGER batches_reserve_end AFTER UPDATE OF status ON batches
WHEN NEW.status IN ('completed', 'failed', 'expired', 'cancelled')
     AND (NEW.reserved_tokens > 0 OR NEW.reserved_micros > 0)
BEGIN
    UPDATE batches SET reserved_tokens = 0, reserved_micros = 0 WHERE id = NEW.id;
END;

-- Running sums of the usage_ledger per tenant and model (the /metrics
-- counters jobd_tokens_total and jobd_cost_micros_total), kept by a trigger
-- in the ledger row's transaction; backfilled from the existing ledger.
CREATE TABLE usage_totals (
    tenant_id          TEXT NOT NULL,      -- tenants.id
    model              TEXT NOT NULL,      -- usage_ledger.model
    prompt_tokens      INTEGER NOT NULL DEFAULT 0,  -- tokens: SUM(usage_ledger.prompt_tokens)
    cached_tokens      INTEGER NOT NULL DEFAULT 0,  -- tokens: SUM(usage_ledger.cached_tokens)
    completion_tokens  INTEGER NOT NULL DEFAULT 0,  -- tokens: SUM(usage_ledger.completion_tokens)
    cost_micros        INTEGER NOT NULL DEFAULT 0,  -- micro-dollars: SUM(usage_ledger.cost_micros)
    requests           INTEGER NOT NULL DEFAULT 0,  -- ledger rows
    PRIMARY KEY (tenant_id, model)
) STRICT, WITHOUT ROWID;
INSERT INTO usage_totals(tenant_id, model, prompt_tokens, cached_tokens, completion_tokens, cost_micros, requests)
    SELECT tenant_id, model, SUM(prompt_tokens), SUM(cached_tokens), SUM(completion_tokens), SUM(cost_micros), COUNT(*)
    FROM usage_ledger GROUP BY tenant_id, model;
CREATE TRIGGER usage_ledger_totals AFTER INSERT ON usage_ledger
BEGIN
    INSERT INTO usage_totals(tenant_id, model, prompt_tokens, cached_tokens, completion_tokens, cost_micros, requests)
    VALUES (NEW.tenant_id, NEW.model, NEW.prompt_tokens, NEW.cached_tokens, NEW.completion_tokens, NEW.cost_micros, 1)
    ON CONFLICT (tenant_id, model) DO UPDATE SET
        prompt_tokens = prompt_tokens + excluded.prompt_tokens,
        cached_tokens = cached_tokens + excluded.cached_tokens,
        completion_tokens = completion_tokens + excluded.completion_tokens,
        cost_micros = cost_micros + excluded.cost_micros,
        requests = requests + 1;
END;

-- @migration 5
-- Partial results (GET /v1/batches/{id}/results, spec/jsonl.md "Partial
-- results"). Every results row gets a commit sequence number from one
-- counter that never goes back, assigned in the row's own transaction;
-- since SQLite has one writer at a time, a row with a larger seq is never
-- visible before one with a smaller seq, so "seq > cursor" pages see every
-- committed row exactly once. The rowid cannot serve: a dead-letter retry
-- deletes its results row, and SQLite may hand the largest rowid out again.
--
-- results now also has:
--   seq   commit sequence number, unique over the table, increasing in commit
--         order; set by the trigger below (never by the inserting statement).
--         Finalization and the results route read a batch's rows in seq order.
-- result_seq (one row): last = the largest seq ever assigned.
--
-- Output expiry (spec/openapi.yaml, output_expires_after / expires_after):
-- batches now also has:
--   output_expires_after_s  seconds: the batch's output and error files expire this long after
--                           they are written (files.expires_at = their created_at + this);
--                           0 = kept until deleted. From output_expires_after.seconds, else
--                           jobd --file-retention, fixed at creation.
-- files.expires_at is now enforced: the sweeper deletes a file's bytes and
-- row once it passes (not while a validating batch still reads it as input),
-- and the API answers 404 for it from that second on.
CREATE TABLE result_seq (
    id    INTEGER PRIMARY KEY CHECK (id = 1),  -- always 1
    last  INTEGER NOT NULL                     -- the largest results.seq ever assigned (0: none)
) STRICT;
ALTER TABLE results ADD COLUMN seq INTEGER;
UPDATE results SET seq = rowid;
INSERT INTO result_seq(id, last) VALUES (1, (SELECT COALESCE(MAX(rowid), 0) FROM results));
CREATE UNIQUE INDEX results_batch_seq ON results(batch_id, seq);
DROP INDEX results_batch;  -- a prefix of results_batch_seq
ALTER TABLE batches ADD COLUMN output_expires_after_s INTEGER NOT NULL DEFAULT 0
    CHECK (output_expires_after_s >= 0);
CREATE INDEX files_expiry ON files(expires_at) WHERE expires_at IS NOT NULL;

-- Several models in one batch: lines may name different body.model values.
-- Such a batch has model 'mixed' (batches.model), and the models it uses
-- are listed here (written when its ingestion succeeds); leasing offers a
-- worker the batches whose model, or one of whose batch_models, it serves,
-- and only the requests of its model (requests.model). A batch of one
-- model has no rows here.
CREATE TABLE batch_models (
    batch_id    TEXT NOT NULL REFERENCES batches(id) ON DELETE CASCADE,  -- a batch with model 'mixed'
    model       TEXT NOT NULL,             -- a body.model value its lines use
    n_requests  INTEGER NOT NULL CHECK (n_requests > 0),  -- its requests naming that model
    PRIMARY KEY (batch_id, model)
) STRICT, WITHOUT ROWID;
CREATE INDEX batch_models_model ON batch_models(model);
CREATE TRIGGER results_seq_assign AFTER INSERT ON results
BEGIN
    UPDATE result_seq SET last = last + 1 WHERE id = 1;
    UPDATE results SET seq = (SELECT last FROM result_seq WHERE id = 1) WHERE rowid = NEW.rowid;
END;

-- @migration 6
-- /v1/embeddings batches: the endpoint CHECK of batches gains
-- '/v1/embeddings'. SQLite cannot ALTER a CHECK constraint; widening one
-- changes no stored row, so the table's CREATE text is edited in place
-- (the procedure of sqlite.org/lang_altertable.html section 7, for changes
-- that "do not affect the on-disk content in any way"), and the schema is
-- reloaded. The edit matches the exact text of migration 1 and fails the
-- migration if it did not change exactly one row.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(sql, 'CHECK (endpoint IN (''/v1/chat/completions'', ''/v1/completions''))',
                          'CHECK (endpoint IN (''/v1/chat/completions'', ''/v1/completions'', ''/v1/embeddings''))')
 WHERE type = 'table' AND name = 'batches'
   AND instr(sql, 'CHECK (endpoint IN (''/v1/chat/completions'', ''/v1/completions''))') > 0;
CREATE TEMP TABLE migration6_check (edited INTEGER CHECK (edited = 1));
INSERT INTO migration6_check VALUES (changes());
DROP TABLE migration6_check;
PRAGMA writable_schema = RESET;

-- @migration 7
-- Endpoint routing: the endpoints each worker serves for each
-- model it registered. A batch's lines are leased only to a worker that
-- serves the batch's endpoint for the asked model (an encoder model serves
-- /v1/embeddings only; a worker on a device without embeddings serves the
-- generation endpoints only). A worker that registers without declaring
-- endpoints serves all three; so do the workers registered before this
-- migration (back-filled below).
CREATE TABLE worker_endpoints (
    worker_id  TEXT NOT NULL REFERENCES workers(id) ON DELETE CASCADE,  -- the worker
    canonical  TEXT NOT NULL,              -- a model's canonical name it registered
    endpoint   TEXT NOT NULL CHECK (endpoint IN ('/v1/chat/completions', '/v1/completions', '/v1/embeddings')),
    PRIMARY KEY (worker_id, canonical, endpoint)
) STRICT, WITHOUT ROWID;
INSERT INTO worker_endpoints(worker_id, canonical, endpoint)
    SELECT DISTINCT m.worker_id, m.canonical, e.ep FROM worker_models m,
        (SELECT '/v1/chat/completions' AS ep UNION ALL SELECT '/v1/completions'
         UNION ALL SELECT '/v1/embeddings') e;

-- @migration 8
-- /v1/responses batches (a translation onto the chat path, spec/responses.md):
-- the endpoint CHECKs of batches and worker_endpoints gain '/v1/responses',
-- by migration 6's procedure (the tables' CREATE text edited in place: a
-- wider CHECK changes no stored row). Both tables carry the same CHECK text
-- since migrations 6 and 7; the migration fails unless exactly those two rows
-- changed. No worker is back-filled: a worker serves /v1/responses only when
-- it declares it at registration.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(sql, 'CHECK (endpoint IN (''/v1/chat/completions'', ''/v1/completions'', ''/v1/embeddings''))',
                          'CHECK (endpoint IN (''/v1/chat/completions'', ''/v1/completions'', ''/v1/embeddings'', ''/v1/responses''))')
 WHERE type = 'table' AND name IN ('batches', 'worker_endpoints')
   AND instr(sql, 'CHECK (endpoint IN (''/v1/chat/completions'', ''/v1/completions'', ''/v1/embeddings''))') > 0;
CREATE TEMP TABLE migration8_check (edited INTEGER CHECK (edited = 2));
INSERT INTO migration8_check VALUES (changes());
DROP TABLE migration8_check;
PRAGMA writable_schema = RESET;

-- @migration 9
-- Fleet economics (spec/usage.md "Fleet cost"): what a worker costs per
-- hour, and which batches each lease served, so worker time can be priced
-- and attributed to batches after the leased requests have moved on.
ALTER TABLE workers ADD COLUMN hourly_cost_micros INTEGER NOT NULL DEFAULT 0;  -- micro-dollars per hour of registered time (jobworker --hourly-cost, jobd --worker-costs); 0 = free
-- The batches of one lease: written in the transaction that opens the
-- lease, from the requests it claimed. Migration 13 adds the batch's
-- tenant and the token sums of the results committed under the lease for
-- it (kept here, so the batch's deletion does not change them).
CREATE TABLE lease_batches (
    lease_id    TEXT NOT NULL,             -- leases.id
    batch_id    TEXT NOT NULL,             -- a batch with requests in that lease (plain text: batches may be deleted)
    n_requests  INTEGER NOT NULL CHECK (n_requests >= 1),  -- its requests handed out in the lease
    PRIMARY KEY (lease_id, batch_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX lease_batches_batch ON lease_batches(batch_id);
-- A worker's leases in time order (its timeline), the leases still running
-- at or after a time (a report's range: a lease's end is at most this), and
-- a lease's results by batch.
CREATE INDEX leases_worker ON leases(worker_id, created_at);
CREATE INDEX leases_span ON leases(coalesce(released_at, expires_at));
CREATE INDEX results_lease ON results(lease_id, batch_id);

-- @migration 10
-- files by storage_path: at startup jobd removes the entries of files/ that
-- no row names (bytes a crash left behind: an upload renamed into place
-- whose row never committed, a deleted file whose unlink did not happen;
-- jobd/work/retention.h), one lookup per entry.
CREATE INDEX files_storage_path ON files(storage_path);

-- @migration 11
-- The contract a batch was created through: 'openai' (POST /v1/batches,
-- /v1/jobs, reruns) or 'anthropic' (POST /v1/messages/batches, whose lines
-- are stored as /v1/chat/completions lines translated from Messages params
-- and whose results are translated back; spec/anthropic.md). Every other
-- part of jobd (leasing, results, usage, webhooks) treats both alike.
ALTER TABLE batches ADD COLUMN api TEXT NOT NULL DEFAULT 'openai' CHECK (api IN ('openai', 'anthropic'));
CREATE INDEX batches_tenant_api ON batches(tenant_id, api, id);

-- @migration 12
-- Result reuse (spec/usage.md "Result reuse"): a deterministic request of a
-- batch that opted in is answered from a result already committed for the
-- same tenant, endpoint, canonical body, model file (content hash) and
-- backend, at zero cost.
--
-- worker_models now also has:
--   model_sha256   lowercase hex SHA-256 of the model file's bytes the worker loaded
--                  (register's models[].sha256), '' when the worker did not say (its
--                  requests are then never reused nor recorded for reuse)
-- requests now also has:
--   reuse_key      lowercase hex SHA-256 reuse key (jobd/work/reuse.h) of the current lease: set
--                  after the claim for a deterministic request of an opted-in batch leased to a
--                  worker whose model hash is known and not answered from reuse; every claim
--                  (-> leased) clears it. A 2xx result committed while it is set is recorded in
--                  reuse_results
-- results and usage_ledger now also have:
--   reused_tokens  prompt + completion tokens of the earlier result this one was answered
--                  from (its own prompt/completion/cached tokens and cost are then 0); 0 for
--                  a computed result
ALTER TABLE worker_models ADD COLUMN model_sha256 TEXT NOT NULL DEFAULT '';
ALTER TABLE requests ADD COLUMN reuse_key TEXT;
ALTER TABLE results ADD COLUMN reused_tokens INTEGER NOT NULL DEFAULT 0 CHECK (reused_tokens >= 0);
ALTER TABLE usage_ledger ADD COLUMN reused_tokens INTEGER NOT NULL DEFAULT 0 CHECK (reused_tokens >= 0);

-- Results that later requests may be answered from: the first computed
-- success per (tenant, key), kept for --reuse-retention after it was made.
-- The key covers the tenant, endpoint, canonical body, model hash and
-- backend (jobd/work/reuse.h); the tenant is also a column and part of the
-- primary key, so a lookup can never cross tenants even on a hash collision.
CREATE TABLE reuse_results (
    tenant_id          TEXT NOT NULL,      -- tenants.id the result belongs to
    reuse_key          TEXT NOT NULL,      -- lowercase hex SHA-256 (64 chars)
    request_id         TEXT NOT NULL,      -- the request that computed it (display, audit)
    status_code        INTEGER NOT NULL,   -- its 2xx status
    body               BLOB NOT NULL,      -- the response body exactly as committed (see encoding)
    encoding           TEXT NOT NULL DEFAULT 'identity' CHECK (encoding IN ('identity', 'zstd')),
    prompt_tokens      INTEGER NOT NULL DEFAULT 0,  -- tokens the original computed (the saving of a reuse)
    completion_tokens  INTEGER NOT NULL DEFAULT 0,  -- tokens
    created_at         INTEGER NOT NULL,   -- unix seconds the original was committed (retention counts from here)
    PRIMARY KEY (tenant_id, reuse_key)
) STRICT, WITHOUT ROWID;
CREATE INDEX reuse_results_age ON reuse_results(created_at);

-- @migration 13
-- Fleet history that deleting a batch cannot rewrite (spec/usage.md "Fleet
-- cost"). A (lease, batch) part kept only the requests it handed out; its
-- tokens and tenant were read from the results and batches rows, so
-- deleting a batch (which takes its requests and their results) moved its
-- cost to tenant '' and re-split the pieces it shared with other batches.
-- Now each part keeps its tenant, copied from the requests when the lease
-- opens, and the token sums of the results committed under it, added when
-- each result is inserted (and when a reused result is marked) and never
-- taken back: deleting a results row (a batch's deletion, a dead letter's
-- retry) leaves the fleet's history as it was.
--
-- lease_batches now also has:
--   tenant_id          tenants.id of the batch ('' for a part whose batch was deleted before
--                      this migration)
--   prompt_tokens      sums of the results rows committed under the lease for the batch
--   cached_tokens      (results.prompt_tokens, cached_tokens, completion_tokens,
--   completion_tokens  reused_tokens), maintained by the two triggers below; >= 0
--   reused_tokens
ALTER TABLE lease_batches ADD COLUMN tenant_id TEXT NOT NULL DEFAULT '';
ALTER TABLE lease_batches ADD COLUMN prompt_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE lease_batches ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE lease_batches ADD COLUMN completion_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE lease_batches ADD COLUMN reused_tokens INTEGER NOT NULL DEFAULT 0;
UPDATE lease_batches SET tenant_id = coalesce((SELECT b.tenant_id FROM batches b WHERE b.id = lease_batches.batch_id), '');
UPDATE lease_batches SET (prompt_tokens, cached_tokens, completion_tokens, reused_tokens) =
    (SELECT coalesce(sum(r.prompt_tokens), 0), coalesce(sum(r.cached_tokens), 0),
            coalesce(sum(r.completion_tokens), 0), coalesce(sum(r.reused_tokens), 0)
     FROM results r WHERE r.lease_id = lease_batches.lease_id AND r.batch_id = lease_batches.batch_id);
CREATE TRIGGER results_lease_sums AFTER INSERT ON results WHEN NEW.lease_id IS NOT NULL
BEGIN
    UPDATE lease_batches SET prompt_tokens = prompt_tokens + NEW.prompt_tokens,
        cached_tokens = cached_tokens + NEW.cached_tokens,
        completion_tokens = completion_tokens + NEW.completion_tokens,
        reused_tokens = reused_tokens + NEW.reused_tokens
     WHERE lease_id = NEW.lease_id AND batch_id = NEW.batch_id;
END;
CREATE TRIGGER results_lease_reused AFTER UPDATE OF reused_tokens ON results
    WHEN NEW.lease_id IS NOT NULL AND NEW.reused_tokens != OLD.reused_tokens
BEGIN
    UPDATE lease_batches SET reused_tokens = reused_tokens + NEW.reused_tokens - OLD.reused_tokens
     WHERE lease_id = NEW.lease_id AND batch_id = NEW.batch_id;
END;

-- @migration 14
-- Fleet cost (spec/usage.md "Fleet cost"): the time a worker was gone, and
-- the workers no one priced.
--
-- workers now also has:
--   unpriced   1 when nothing gave the worker a price at registration (no
--              jobd --worker-costs class matched its name and it declared no
--              hourly_cost_micros): its time costs 0 and the fleet view flags it
ALTER TABLE workers ADD COLUMN unpriced INTEGER NOT NULL DEFAULT 0 CHECK (unpriced IN (0, 1));
-- A worker silent for longer than the worker TTL that calls again keeps its
-- id; the silence is recorded here when it calls (the store's first
-- bookkeeping call after it) so the fleet view does not count it as
-- registered idle time: the gap [gone_at, back_at) is time the worker was
-- gone, except where a lease it held still ran (charged until it ended or
-- lapsed, like any lease).
CREATE TABLE worker_gaps (
    worker_id   TEXT NOT NULL,             -- workers.id (workers rows are never deleted)
    gone_at     INTEGER NOT NULL,          -- unix seconds: its last call before the silence (workers.last_seen then)
    back_at     INTEGER NOT NULL,          -- unix seconds: the call that ended it; > gone_at + the TTL
    PRIMARY KEY (worker_id, gone_at)
) STRICT, WITHOUT ROWID;

-- @migration 15
-- A worker's longest lease in one index probe (released or expiry minus
-- start, an upper bound of each lease's length): GET /v1/batches/{id}'s
-- fleet_cost reads the leases of the batch's workers that overlap the
-- batch's own, and a lease that overlaps one starting at t started after
-- t minus the longest. Without the bound every earlier lease of the worker
-- was read for each of the batch's leases (1 s for a batch of 1,000 leases
-- among 100,000; bench/NOTES.md "Fleet view cost").
CREATE INDEX leases_worker_len ON leases(worker_id, coalesce(released_at, expires_at) - created_at);
