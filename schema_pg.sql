-- schema_pg.sql - jobd's PostgreSQL schema (the store's second engine).
--
-- The same tables, columns, constraints, indexes and invariants as
-- schema.sql, which stays the documentation of every column: read the
-- comments there. Embedded into jobd at build time (store_schema_pg_sql)
-- and applied by the store's migration runner when jobd runs on PostgreSQL
-- (--database postgresql://...). Differences from the SQLite file:
--   * types: INTEGER -> BIGINT (SQLite's integers are 64-bit), BLOB ->
--     BYTEA, REAL -> DOUBLE PRECISION, row-id keys -> BIGINT identity
--     columns; no STRICT / WITHOUT ROWID; length() of a blob -> octet_length;
--   * the version is the one row of schema_version (no PRAGMA user_version),
--     read and advanced by the runner under pg_advisory_xact_lock, so
--     several jobd starting at once migrate once;
--   * triggers are PL/pgSQL functions with the same bodies;
--   * the numbering is its own: PostgreSQL migration 1 is the SQLite schema
--     at its migration 5 (the first release of this file), migration 2 is
--     SQLite's 6 and 7, migration 3 is PostgreSQL's own (results.seq under
--     per-batch row locks). A change to the schema adds a block to both
--     files (unless, like 3, it only concerns PostgreSQL's concurrency).
--
-- results.seq and concurrency: migration 1's BEFORE INSERT trigger took the
-- next value from the one row of result_seq with an UPDATE, whose row lock
-- ordered every result commit globally (SQLite's single writer). Migration
-- 3 replaces it with a sequence taken under the row lock of the result's
-- batch, held to commit: within a batch a row with a larger seq is never
-- visible before one with a smaller seq (the "seq > cursor" pages of one
-- batch stay exact), and commits to different batches no longer wait for
-- each other.
--
-- The runner splits this file at "-- @migration N" lines like schema.sql.

-- @migration 1

-- A tenant: the unit of isolation. Every other object belongs to exactly one
-- tenant, and every query the API makes carries the tenant of the
-- authenticated key (never one taken from the request).
CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,          -- "ten_..." (common/id.h)
    name        TEXT NOT NULL UNIQUE,      -- operator-chosen name, 1..64 bytes of [A-Za-z0-9._-]
    created_at  BIGINT NOT NULL           -- unix seconds
);

-- API keys. The plaintext ("sk-jobd-<key id>_<secret>") is shown once at
-- creation and never stored: only the SHA-256 of the secret is kept (keys
-- carry 240 random bits, so a fast hash is adequate). Lookup is by key id,
-- then the hash is compared in constant time.
CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,         -- key id: 10 lowercase Crockford base32 chars, public (shown in lists)
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),  -- owner; requests with this key act as this tenant
    secret_hash  BYTEA NOT NULL CHECK (octet_length(secret_hash) = 32),  -- SHA-256 of the secret part
    created_at   BIGINT NOT NULL,         -- unix seconds
    revoked_at   BIGINT                   -- unix seconds; NULL while the key is valid. Revocation is final
);
CREATE INDEX api_keys_tenant ON api_keys(tenant_id, created_at);

-- Uploaded and generated files. The bytes live under the data directory at
-- storage_path; this row is the metadata. Deleting a file deletes the row
-- (batches keep the id as plain text, so they are not FK-bound to files).
CREATE TABLE files (
    id            TEXT PRIMARY KEY,        -- "file-..."
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),  -- owner
    purpose       TEXT NOT NULL CHECK (purpose IN ('batch', 'batch_output')),  -- OpenAI purpose
    filename      TEXT NOT NULL,           -- client-supplied name, display only, never used as a path
    bytes         BIGINT NOT NULL CHECK (bytes >= 0),  -- logical (uncompressed) size in bytes
    sha256        TEXT NOT NULL,           -- lowercase hex SHA-256 of the logical content (64 chars)
    storage_path  TEXT NOT NULL,           -- path of the stored bytes, relative to the data directory; server-generated
    encoding      TEXT NOT NULL DEFAULT 'identity' CHECK (encoding IN ('identity', 'zstd')),  -- how the stored bytes are encoded
    status        TEXT NOT NULL DEFAULT 'processed' CHECK (status IN ('uploaded', 'processed', 'error')),  -- OpenAI's (deprecated) file status
    created_at    BIGINT NOT NULL,        -- unix seconds
    expires_at    BIGINT                  -- unix seconds after which the file may be purged; NULL = kept until deleted
);
CREATE INDEX files_tenant ON files(tenant_id, id);

-- Batches (OpenAI batch objects). status follows the state machine in
-- jobd/store/store.h (store_batch_transition is the only writer of status); each
-- *_at column is set when the batch enters that state.
CREATE TABLE batches (
    id                   TEXT PRIMARY KEY,  -- "batch_..."
    tenant_id            TEXT NOT NULL REFERENCES tenants(id),  -- owner
    endpoint             TEXT NOT NULL CHECK (endpoint IN ('/v1/chat/completions', '/v1/completions')),  -- every line's url must equal it
    input_file_id        TEXT NOT NULL,     -- files.id of the JSONL input (plain text: the file may be deleted later)
    completion_window_s  BIGINT NOT NULL CHECK (completion_window_s > 0),  -- seconds ("24h" = 86400)
    status               TEXT NOT NULL CHECK (status IN ('validating', 'failed', 'in_progress', 'finalizing',
                                                      'completed', 'expired', 'cancelling', 'cancelled')),
    model                TEXT,              -- the one model every line names, or 'mixed' when lines name several (see
                                            -- batch_models, migration 5); set by ingest (checkpointed), NULL before
    metadata             TEXT,              -- JSON object of up to 16 string pairs (key <= 64, value <= 512 bytes), or NULL
    errors               TEXT,              -- JSON array of {code,line,message,param} (<= 100), or NULL; final once status is failed
    output_file_id       TEXT,              -- files.id of the success lines, set at finalization
    error_file_id        TEXT,              -- files.id of the failure lines, set at finalization
    n_total              BIGINT NOT NULL DEFAULT 0,  -- request_counts.total: requests persisted (set on entering in_progress)
    n_completed          BIGINT NOT NULL DEFAULT 0,  -- request_counts.completed: requests in state succeeded
    n_failed             BIGINT NOT NULL DEFAULT 0,  -- request_counts.failed: requests in state failed
    ingest_line          BIGINT NOT NULL DEFAULT 0,  -- ingest checkpoint: input lines 1..ingest_line are validated and their requests committed
    ingest_requests      BIGINT NOT NULL DEFAULT 0,  -- requests committed by ingest so far (= n_total once in_progress)
    created_at           BIGINT NOT NULL,  -- unix seconds
    expires_at           BIGINT NOT NULL,  -- created_at + completion_window_s
    in_progress_at       BIGINT,           -- unix seconds of entering in_progress, else NULL
    finalizing_at        BIGINT,           -- ... finalizing
    completed_at         BIGINT,           -- ... completed
    failed_at            BIGINT,           -- ... failed
    expired_at           BIGINT,           -- ... expired
    cancelling_at        BIGINT,           -- ... cancelling
    cancelled_at         BIGINT,           -- ... cancelled
    priority             BIGINT NOT NULL DEFAULT 0,  -- metadata "priority" (string of an integer -1000..1000, default 0): orders a
                                            -- tenant's own batches for leasing (higher first); never ranks one tenant over another
    usage_prompt_tokens      BIGINT NOT NULL DEFAULT 0,  -- usage.input_tokens: sum over the batch's results, set at finalization
    usage_completion_tokens  BIGINT NOT NULL DEFAULT 0,  -- usage.output_tokens: idem
    usage_cached_tokens      BIGINT NOT NULL DEFAULT 0,  -- usage.input_tokens_details.cached_tokens: idem
    CHECK (n_completed + n_failed <= n_total OR status = 'validating')
);
CREATE INDEX batches_tenant ON batches(tenant_id, id);
CREATE INDEX batches_status ON batches(status, id);

-- Workers: inference processes registered with jobd (spec/worker-protocol.md).
-- A worker re-registers after a restart and gets a new id; old rows simply
-- stop being seen. "Served" means last_seen within the worker TTL.
CREATE TABLE workers (
    id             TEXT PRIMARY KEY,       -- "wrk_..."
    name           TEXT NOT NULL,          -- self-reported name (host/pid/gpu), 1..128 bytes, display only
    device         TEXT NOT NULL,          -- self-reported device ("cpu", "cuda:0 H200"...), <= 128 bytes
    kv_tokens      BIGINT NOT NULL DEFAULT 0,  -- capacity hint: KV cache size in tokens (0 = unknown)
    pack_size      BIGINT NOT NULL DEFAULT 0,  -- capacity hint: preferred requests per lease (0 = unknown)
    tokens_per_s   DOUBLE PRECISION NOT NULL DEFAULT 0,     -- last reported generation throughput (tokens/s), from heartbeats
    registered_at  BIGINT NOT NULL,       -- unix seconds
    last_seen      BIGINT NOT NULL        -- unix seconds of the last register/lease/heartbeat/results call
);
CREATE INDEX workers_seen ON workers(last_seen);

-- The model names a worker answers to: for each model it loaded, the
-- canonical name and every alias (a request's body.model must equal one).
CREATE TABLE worker_models (
    worker_id  TEXT NOT NULL REFERENCES workers(id) ON DELETE CASCADE,  -- the worker
    canonical  TEXT NOT NULL,              -- the model's canonical name (what a lease asks for)
    name       TEXT NOT NULL,              -- canonical or alias, 1..128 bytes
    PRIMARY KEY (worker_id, canonical, name)
);
CREATE INDEX worker_models_name ON worker_models(name);

-- Fair leasing state: per model (a body.model value), the tenant served
-- last, so the next lease starts its round-robin with the tenant after it.
CREATE TABLE lease_rr (
    model           TEXT PRIMARY KEY,      -- body.model value
    last_tenant_id  TEXT NOT NULL          -- tenants.id served last (plain text: the cursor only compares ids)
);

-- Leases: a worker's claim on a pack of requests, renewed by heartbeats.
-- A request in state leased names its lease; when expires_at passes the
-- sweeper returns the lease's requests to queued.
CREATE TABLE leases (
    id          TEXT PRIMARY KEY,          -- "lease_..."
    worker_id   TEXT NOT NULL,             -- workers.id of the holder (plain text: worker rows may be purged)
    model       TEXT NOT NULL,             -- the canonical model the worker asked for; leased requests name it or an alias
    n_requests  BIGINT NOT NULL DEFAULT 0,  -- requests handed out in this lease
    created_at  BIGINT NOT NULL,          -- unix seconds
    expires_at  BIGINT NOT NULL,          -- unix seconds; heartbeats move it forward
    released_at BIGINT                    -- unix seconds the lease ended (all results in, expired or given back), else NULL
);
CREATE INDEX leases_expiry ON leases(expires_at) WHERE released_at IS NULL;

-- Requests: one row per input line of a validated batch. status follows the
-- state machine in jobd/store/store.h (store_request_transition is the only writer
-- of status). Rows of a batch still in 'validating' are not visible to work
-- distribution (it only leases requests whose batch is in_progress).
CREATE TABLE requests (
    id                 TEXT PRIMARY KEY,   -- "req_..."; also the id of its output line
    batch_id           TEXT NOT NULL REFERENCES batches(id) ON DELETE CASCADE,  -- owning batch
    tenant_id          TEXT NOT NULL,      -- = batches.tenant_id (denormalised for tenant-scoped queries)
    line               BIGINT NOT NULL CHECK (line >= 1),  -- 1-based line number in the input file
    custom_id          TEXT NOT NULL,      -- caller's id, unique within the batch
    model              TEXT NOT NULL,      -- body.model
    body               TEXT NOT NULL,      -- the line's body JSON text exactly as sent (what the worker runs)
    status             TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'leased', 'succeeded', 'failed')),
    attempts           BIGINT NOT NULL DEFAULT 0,  -- times the request was leased (incremented on queued -> leased)
    next_attempt_at    BIGINT NOT NULL DEFAULT 0,  -- unix seconds; a queued request is not leased before this (retry backoff)
    lease_id           TEXT,               -- leases.id while status = leased, else NULL
    prompt_tokens_est  BIGINT NOT NULL DEFAULT 0,  -- tokens, estimated at ingest as prompt bytes / 4 (for packing and quotas)
    max_tokens         BIGINT NOT NULL DEFAULT 0,  -- output token cap: max_completion_tokens / max_tokens, or the model limit
    last_error         TEXT,               -- last failure message (retry or terminal), NULL if none
    created_at         BIGINT NOT NULL,   -- unix seconds
    updated_at         BIGINT NOT NULL,   -- unix seconds of the last status change
    finished_at        BIGINT,            -- unix seconds of entering succeeded/failed, else NULL
    UNIQUE (batch_id, custom_id),
    CHECK ((status = 'leased') = (lease_id IS NOT NULL))
);
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
    fingerprint  BYTEA NOT NULL CHECK (octet_length(fingerprint) = 32),  -- SHA-256 of method, path and body of the first request
    status_code  BIGINT,                  -- HTTP status of the stored response; NULL while in flight
    response     BYTEA,                     -- response body replayed on retries; NULL while in flight
    created_at   BIGINT NOT NULL,         -- unix seconds of the reservation (retention counts from here)
    completed_at BIGINT,                  -- unix seconds the response was stored
    PRIMARY KEY (tenant_id, key)
);
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
    attempts    BIGINT NOT NULL,          -- attempts made before giving up
    reason      TEXT NOT NULL,             -- machine code: 'worker_error' (transient errors) or 'lease_expired' (last attempt's lease lapsed)
    last_error  TEXT,                      -- last error message seen, if any
    line        TEXT NOT NULL,             -- the original input line, rebuilt: {"custom_id","method","url","body"}
    created_at  BIGINT NOT NULL           -- unix seconds
);
CREATE INDEX dead_letters_batch ON dead_letters(batch_id, request_id);
CREATE INDEX dead_letters_tenant ON dead_letters(tenant_id, request_id);

-- Results: the outcome of each request, written exactly once (the primary
-- key is the request id: a second commit for the same request is refused).
CREATE TABLE results (
    request_id         TEXT PRIMARY KEY REFERENCES requests(id) ON DELETE CASCADE,  -- exactly one result per request
    batch_id           TEXT NOT NULL,      -- its batch (finalization scans by batch)
    lease_id           TEXT,               -- lease under which it was produced (fencing audit)
    status_code        BIGINT,            -- HTTP-like status of the response (200, 400...); NULL for non-HTTP errors
    body               BYTEA,               -- response body JSON (may be zstd-compressed: see encoding), NULL if none
    encoding           TEXT NOT NULL DEFAULT 'identity' CHECK (encoding IN ('identity', 'zstd')),  -- encoding of body
    error_code         TEXT,               -- output line error.code for non-HTTP failures, else NULL
    error_message      TEXT,               -- output line error.message, else NULL
    prompt_tokens      BIGINT NOT NULL DEFAULT 0,  -- tokens actually read
    completion_tokens  BIGINT NOT NULL DEFAULT 0,  -- tokens generated
    cached_tokens      BIGINT NOT NULL DEFAULT 0,  -- prompt tokens served from a shared prefix (subset of prompt_tokens)
    queue_ms           BIGINT NOT NULL DEFAULT 0,  -- worker-side wait between lease and start of prefill, ms
    prefill_ms         BIGINT NOT NULL DEFAULT 0,  -- wall time of its prefill, ms
    decode_ms          BIGINT NOT NULL DEFAULT 0,  -- wall time of its decode, ms
    gpu_ms             BIGINT NOT NULL DEFAULT 0,  -- milliseconds of device time the worker attributes to it
    created_at         BIGINT NOT NULL    -- unix seconds
);
-- Heartbeats report requests of a lease that were ended under it by a cancel or expiry.
CREATE INDEX results_lease_stop ON results(lease_id) WHERE error_code IN ('batch_cancelled', 'batch_expired');

-- Webhook endpoints registered by tenants.
CREATE TABLE webhook_endpoints (
    id           TEXT PRIMARY KEY,         -- "whep_..."
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),  -- owner
    url          TEXT NOT NULL,            -- https URL events are POSTed to (SSRF-checked at registration and delivery)
    secret       TEXT NOT NULL,            -- "whsec_<base64>" signing secret (Standard Webhooks)
    event_types  TEXT NOT NULL DEFAULT '*',  -- comma-separated event types ("batch.completed,...") or "*"
    created_at   BIGINT NOT NULL,         -- unix seconds
    disabled_at  BIGINT                   -- unix seconds; NULL = active (410 Gone or persistent failure disables)
);
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
    created_at  BIGINT NOT NULL,          -- unix seconds
    fanned_out  BIGINT NOT NULL DEFAULT 0 CHECK (fanned_out IN (0, 1))  -- 1 once deliveries rows exist for every endpoint
);
CREATE INDEX webhook_events_pending ON webhook_events(id) WHERE fanned_out = 0;

-- Webhook deliveries: one event to one endpoint, retried with backoff.
CREATE TABLE webhook_deliveries (
    id               BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,  -- row id
    event_id         TEXT NOT NULL REFERENCES webhook_events(id) ON DELETE CASCADE,
    endpoint_id      TEXT NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
    status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),  -- failed = gave up
    attempts         BIGINT NOT NULL DEFAULT 0,  -- POSTs made
    next_attempt_at  BIGINT NOT NULL,     -- unix seconds of the next POST while pending
    last_status      BIGINT,              -- HTTP status of the last attempt, NULL if it got no response
    last_error       TEXT,                 -- transport error or response excerpt of the last attempt
    delivered_at     BIGINT,              -- unix seconds of the 2xx, else NULL
    UNIQUE (event_id, endpoint_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_at) WHERE status = 'pending';

-- Usage ledger: one row per request that consumed compute, written in the
-- same transaction as its result. Append-only; usage reports sum it.
CREATE TABLE usage_ledger (
    id                 BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,  -- row id (append order)
    tenant_id          TEXT NOT NULL REFERENCES tenants(id),  -- who is billed
    batch_id           TEXT NOT NULL,      -- batch of the request
    request_id         TEXT NOT NULL UNIQUE,  -- at most one charge per request
    model              TEXT NOT NULL,      -- model that served it
    prompt_tokens      BIGINT NOT NULL CHECK (prompt_tokens >= 0),      -- tokens
    completion_tokens  BIGINT NOT NULL CHECK (completion_tokens >= 0),  -- tokens
    cached_tokens      BIGINT NOT NULL DEFAULT 0 CHECK (cached_tokens >= 0),  -- tokens (part of prompt_tokens)
    cost_micros        BIGINT NOT NULL CHECK (cost_micros >= 0),        -- cost in millionths of the currency unit
    created_at         BIGINT NOT NULL    -- unix seconds
);
CREATE INDEX usage_ledger_tenant ON usage_ledger(tenant_id, created_at);

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
ALTER TABLE webhook_endpoints ADD COLUMN failing_since BIGINT;
ALTER TABLE webhook_deliveries ADD COLUMN created_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE webhook_deliveries ADD COLUMN last_attempt_at BIGINT;
ALTER TABLE webhook_deliveries ADD COLUMN last_latency_ms BIGINT;
CREATE INDEX webhook_endpoints_url ON webhook_endpoints(tenant_id, kind, url);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries(endpoint_id, id);

-- The tenant's default signing secret: signs deliveries to per-batch URLs
-- (metadata.webhook_url). Created on first use (the first such delivery, or
-- GET /v1/webhook_secret), never changes.
CREATE TABLE webhook_tenant_secrets (
    tenant_id   TEXT PRIMARY KEY REFERENCES tenants(id),  -- owner
    secret      TEXT NOT NULL,             -- "whsec_<base64 of 32 random bytes>"
    created_at  BIGINT NOT NULL           -- unix seconds
);

-- One row per delivery attempt (the delivery log). Deleted with the delivery.
CREATE TABLE webhook_attempts (
    id           BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,      -- row id (attempt order)
    delivery_id  BIGINT NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
    attempt      BIGINT NOT NULL,         -- 1-based attempt number of the delivery (webhook_deliveries.attempts then)
    started_at   BIGINT NOT NULL,         -- unix seconds the POST started
    status_code  BIGINT,                  -- HTTP status, NULL when no response arrived
    latency_ms   BIGINT NOT NULL,         -- ms until the response (or the failure)
    outcome      TEXT NOT NULL CHECK (outcome IN ('delivered', 'retry', 'failed', 'disabled', 'blocked')),  -- what the attempt led to
    error        TEXT                      -- transport error or response excerpt (<= 256 bytes), NULL on success
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts(delivery_id, id);

-- Cost accounting (spec/usage.md). usage_ledger.cost_micros is now priced
-- from the configured table when a result commits; a batch keeps the sum of
-- its ledger rows' cost, set at finalization with the token sums; reports by
-- batch read the ledger through its batch index.
--
-- batches now also has:
--   usage_cost_micros  sum of cost_micros of the batch's usage_ledger rows, set at finalization
ALTER TABLE batches ADD COLUMN usage_cost_micros BIGINT NOT NULL DEFAULT 0;
CREATE INDEX usage_ledger_batch ON usage_ledger(batch_id);

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
ALTER TABLE batches ADD COLUMN budgeted BIGINT NOT NULL DEFAULT 0 CHECK (budgeted IN (0, 1));
ALTER TABLE batches ADD COLUMN reserved_tokens BIGINT NOT NULL DEFAULT 0 CHECK (reserved_tokens >= 0);
ALTER TABLE batches ADD COLUMN reserved_micros BIGINT NOT NULL DEFAULT 0 CHECK (reserved_micros >= 0);
ALTER TABLE batches ADD COLUMN reserve_price_in BIGINT NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN reserve_price_out BIGINT NOT NULL DEFAULT 0;
CREATE INDEX batches_reserved ON batches(tenant_id) WHERE reserved_tokens > 0 OR reserved_micros > 0;

-- Per-tenant limits (PUT /v1/admin/tenants/{name}/limits). A NULL limit is
-- no limit; a tenant without a row has none.
CREATE TABLE tenant_limits (
    tenant_id           TEXT PRIMARY KEY REFERENCES tenants(id),  -- the tenant
    max_queued_tokens   BIGINT CHECK (max_queued_tokens >= 0),   -- tokens: cap on the reserved_tokens of its batches
    max_daily_micros    BIGINT CHECK (max_daily_micros >= 0),    -- micro-dollars: cap on ledger cost of the UTC day + reservations
    max_monthly_micros  BIGINT CHECK (max_monthly_micros >= 0),  -- micro-dollars: idem for the UTC calendar month
    updated_at          BIGINT NOT NULL                          -- unix seconds
);

-- A request finishing (queued/leased -> succeeded/failed) releases its share.

-- A finished request coming back (dead letter retry: failed -> queued) reserves again.

-- A batch reaching a terminal state releases whatever it still holds.

-- Running sums of the usage_ledger per tenant and model (the /metrics
-- counters jobd_tokens_total and jobd_cost_micros_total), kept by a trigger
-- in the ledger row's transaction; backfilled from the existing ledger.
CREATE TABLE usage_totals (
    tenant_id          TEXT NOT NULL,      -- tenants.id
    model              TEXT NOT NULL,      -- usage_ledger.model
    prompt_tokens      BIGINT NOT NULL DEFAULT 0,  -- tokens: SUM(usage_ledger.prompt_tokens)
    cached_tokens      BIGINT NOT NULL DEFAULT 0,  -- tokens: SUM(usage_ledger.cached_tokens)
    completion_tokens  BIGINT NOT NULL DEFAULT 0,  -- tokens: SUM(usage_ledger.completion_tokens)
    cost_micros        BIGINT NOT NULL DEFAULT 0,  -- micro-dollars: SUM(usage_ledger.cost_micros)
    requests           BIGINT NOT NULL DEFAULT 0,  -- ledger rows
    PRIMARY KEY (tenant_id, model)
);

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
    id    BIGINT PRIMARY KEY CHECK (id = 1),  -- always 1
    last  BIGINT NOT NULL                     -- the largest results.seq ever assigned (0: none)
);
ALTER TABLE results ADD COLUMN seq BIGINT;
INSERT INTO result_seq(id, last) VALUES (1, 0);
CREATE UNIQUE INDEX results_batch_seq ON results(batch_id, seq);
ALTER TABLE batches ADD COLUMN output_expires_after_s BIGINT NOT NULL DEFAULT 0
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
    n_requests  BIGINT NOT NULL CHECK (n_requests > 0),  -- its requests naming that model
    PRIMARY KEY (batch_id, model)
);
CREATE INDEX batch_models_model ON batch_models(model);

-- Triggers (schema.sql migration 4 and 5), as PL/pgSQL.
CREATE FUNCTION jobd_reserve_share(p BIGINT, m BIGINT, pin BIGINT, pout BIGINT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $$
    SELECT (p / 1000000) * pin + (m / 1000000) * pout +
           ((p % 1000000) * pin + (m % 1000000) * pout + 500000) / 1000000
$$;

CREATE FUNCTION requests_reserve() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status IN ('queued', 'leased') AND NEW.status IN ('succeeded', 'failed') THEN
        UPDATE batches SET
            reserved_tokens = greatest(0, reserved_tokens - (NEW.prompt_tokens_est + NEW.max_tokens)),
            reserved_micros = greatest(0, reserved_micros - jobd_reserve_share(NEW.prompt_tokens_est,
                                  NEW.max_tokens, reserve_price_in, reserve_price_out))
        WHERE id = NEW.batch_id AND budgeted = 1
          AND status NOT IN ('completed', 'failed', 'expired', 'cancelled');
    ELSIF OLD.status IN ('succeeded', 'failed') AND NEW.status IN ('queued', 'leased') THEN
        UPDATE batches SET
            reserved_tokens = reserved_tokens + (NEW.prompt_tokens_est + NEW.max_tokens),
            reserved_micros = reserved_micros + jobd_reserve_share(NEW.prompt_tokens_est,
                                  NEW.max_tokens, reserve_price_in, reserve_price_out)
        WHERE id = NEW.batch_id AND budgeted = 1
          AND status NOT IN ('completed', 'failed', 'expired', 'cancelled');
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER requests_reserve AFTER UPDATE OF status ON requests
    FOR EACH ROW EXECUTE FUNCTION requests_reserve();

CREATE FUNCTION batches_reserve_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE batches SET reserved_tokens = 0, reserved_micros = 0 WHERE id = NEW.id;
    RETURN NULL;
END $$;
CREATE TRIGGER batches_reserve_end AFTER UPDATE OF status ON batches FOR EACH ROW
    WHEN (NEW.status IN ('completed', 'failed', 'expired', 'cancelled')
          AND (NEW.reserved_tokens > 0 OR NEW.reserved_micros > 0))
    EXECUTE FUNCTION batches_reserve_end();

CREATE FUNCTION usage_ledger_totals() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_totals AS t(tenant_id, model, prompt_tokens, cached_tokens, completion_tokens,
                                  cost_micros, requests)
    VALUES (NEW.tenant_id, NEW.model, NEW.prompt_tokens, NEW.cached_tokens, NEW.completion_tokens,
            NEW.cost_micros, 1)
    ON CONFLICT (tenant_id, model) DO UPDATE SET
        prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
        cached_tokens = t.cached_tokens + excluded.cached_tokens,
        completion_tokens = t.completion_tokens + excluded.completion_tokens,
        cost_micros = t.cost_micros + excluded.cost_micros,
        requests = t.requests + 1;
    RETURN NULL;
END $$;
CREATE TRIGGER usage_ledger_totals AFTER INSERT ON usage_ledger
    FOR EACH ROW EXECUTE FUNCTION usage_ledger_totals();

CREATE FUNCTION results_seq_assign() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE result_seq SET last = last + 1 WHERE id = 1 RETURNING last INTO NEW.seq;
    RETURN NEW;
END $$;
CREATE TRIGGER results_seq_assign BEFORE INSERT ON results
    FOR EACH ROW EXECUTE FUNCTION results_seq_assign();

-- @migration 2
-- Embeddings: SQLite migrations 6 and 7. The endpoint CHECK of
-- batches gains '/v1/embeddings' (PostgreSQL alters the constraint; SQLite
-- edits the table's text), and worker_endpoints holds the endpoints each
-- worker serves for each model it registered, back-filled with all three
-- for the workers registered before it.
ALTER TABLE batches DROP CONSTRAINT batches_endpoint_check;
ALTER TABLE batches ADD CONSTRAINT batches_endpoint_check
    CHECK (endpoint IN ('/v1/chat/completions', '/v1/completions', '/v1/embeddings'));
CREATE TABLE worker_endpoints (
    worker_id  TEXT NOT NULL REFERENCES workers(id) ON DELETE CASCADE,
    canonical  TEXT NOT NULL,
    endpoint   TEXT NOT NULL CHECK (endpoint IN ('/v1/chat/completions', '/v1/completions', '/v1/embeddings')),
    PRIMARY KEY (worker_id, canonical, endpoint)
);
INSERT INTO worker_endpoints(worker_id, canonical, endpoint)
    SELECT DISTINCT m.worker_id, m.canonical, e.ep FROM worker_models m,
        (SELECT '/v1/chat/completions' AS ep UNION ALL SELECT '/v1/completions'
         UNION ALL SELECT '/v1/embeddings') e;

-- @migration 3
-- Row locks instead of the one writer lock on the hot paths
-- (PostgreSQL only: SQLite has one writer and needs nothing). results.seq
-- comes from a sequence, taken after the row of the result's batch is
-- locked (FOR NO KEY UPDATE, held to commit): two transactions that write
-- results of one batch take their numbers one after the other, so within a
-- batch a row with a larger seq is never visible before one with a smaller
-- seq (what "seq > cursor" pages need: the results route and finalization
-- read one batch at a time), while commits to different batches no longer
-- wait for each other on the one row of result_seq (kept, unused).
CREATE SEQUENCE results_seq_gen;
SELECT setval('results_seq_gen', (SELECT last FROM result_seq WHERE id = 1) + 1, false);
CREATE OR REPLACE FUNCTION results_seq_assign() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM batches WHERE id = NEW.batch_id FOR NO KEY UPDATE;
    NEW.seq := nextval('results_seq_gen');
    RETURN NEW;
END $$;
-- usage_totals by one statement-level trigger per INSERT into the ledger
-- (a transition table, summed per tenant and model) instead of one upsert
-- per ledger row: a results commit inserts its ledger rows with one
-- statement (hundreds of rows), which updated the same usage_totals row
-- once per row, each a new row version. Same sums.
DROP TRIGGER usage_ledger_totals ON usage_ledger;
CREATE FUNCTION usage_ledger_totals_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_totals AS t(tenant_id, model, prompt_tokens, cached_tokens, completion_tokens,
                                  cost_micros, requests)
    SELECT tenant_id, model, sum(prompt_tokens)::bigint, sum(cached_tokens)::bigint,
           sum(completion_tokens)::bigint, sum(cost_micros)::bigint, count(*)
    FROM ledger_new GROUP BY tenant_id, model ORDER BY tenant_id, model
    ON CONFLICT (tenant_id, model) DO UPDATE SET
        prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
        cached_tokens = t.cached_tokens + excluded.cached_tokens,
        completion_tokens = t.completion_tokens + excluded.completion_tokens,
        cost_micros = t.cost_micros + excluded.cost_micros,
        requests = t.requests + excluded.requests;
    RETURN NULL;
END $$;
CREATE TRIGGER usage_ledger_totals AFTER INSERT ON usage_ledger REFERENCING NEW TABLE AS ledger_new
    FOR EACH STATEMENT EXECUTE FUNCTION usage_ledger_totals_stmt();
-- Per-row trigger work cut for the set-based commits: requests_reserve
-- runs once per UPDATE statement over its transition tables (a commit of
-- hundreds of requests ran it per row), and results_seq_assign locks a
-- batch's row once per transaction
-- (the batch id it holds is kept in a transaction-local setting, which a
-- rollback to a savepoint undoes together with the lock).
DROP TRIGGER requests_reserve ON requests;
CREATE FUNCTION requests_reserve_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- requests_reserve per statement: the shares of the requests that
    -- finished (queued/leased -> succeeded/failed) are released and those
    -- that came back (succeeded/failed -> queued/leased) reserved again,
    -- summed per budgeted batch. One statement does one kind (a commit ends
    -- requests, a dead-letter retry reopens one), so releasing the sum
    -- clamped at 0 equals releasing each share clamped at 0 in turn.
    UPDATE batches b SET
        reserved_tokens = greatest(0, b.reserved_tokens - d.fin_tokens) + d.re_tokens,
        reserved_micros = greatest(0, b.reserved_micros - d.fin_micros) + d.re_micros
    FROM (SELECT x.batch_id,
                 sum(CASE WHEN x.fin THEN x.tokens ELSE 0 END) AS fin_tokens,
                 sum(CASE WHEN x.fin THEN x.micros ELSE 0 END) AS fin_micros,
                 sum(CASE WHEN x.fin THEN 0 ELSE x.tokens END) AS re_tokens,
                 sum(CASE WHEN x.fin THEN 0 ELSE x.micros END) AS re_micros
          FROM (SELECT n.batch_id, n.prompt_tokens_est + n.max_tokens AS tokens,
                       jobd_reserve_share(n.prompt_tokens_est, n.max_tokens, bb.reserve_price_in,
                                          bb.reserve_price_out) AS micros,
                       o.status IN ('queued', 'leased') AS fin
                FROM req_new n JOIN req_old o ON o.id = n.id
                JOIN batches bb ON bb.id = n.batch_id AND bb.budgeted = 1
                WHERE (o.status IN ('queued', 'leased') AND n.status IN ('succeeded', 'failed'))
                   OR (o.status IN ('succeeded', 'failed') AND n.status IN ('queued', 'leased'))) x
          GROUP BY x.batch_id) d
    WHERE b.id = d.batch_id AND b.budgeted = 1
      AND b.status NOT IN ('completed', 'failed', 'expired', 'cancelled');
    RETURN NULL;
END $$;
CREATE TRIGGER requests_reserve AFTER UPDATE ON requests
    REFERENCING OLD TABLE AS req_old NEW TABLE AS req_new
    FOR EACH STATEMENT EXECUTE FUNCTION requests_reserve_stmt();
-- A batch's last ledger rows by id (the completion-estimate query's
-- "ORDER BY id DESC LIMIT 256" of one batch): PostgreSQL's index on
-- batch_id alone does not keep them in id order (SQLite's keeps rowids).
DROP INDEX usage_ledger_batch;
CREATE INDEX usage_ledger_batch ON usage_ledger(batch_id, id);
CREATE OR REPLACE FUNCTION results_seq_assign() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('jobd.seq_batch', true) IS DISTINCT FROM NEW.batch_id THEN
        PERFORM 1 FROM batches WHERE id = NEW.batch_id FOR NO KEY UPDATE;
        PERFORM set_config('jobd.seq_batch', NEW.batch_id, true);
    END IF;
    NEW.seq := nextval('results_seq_gen');
    RETURN NEW;
END $$;

-- @migration 4
-- /v1/responses batches: SQLite migration 8. The endpoint CHECKs of batches
-- and worker_endpoints gain '/v1/responses'; no worker is back-filled (a
-- worker serves it only when it declares it at registration).
ALTER TABLE batches DROP CONSTRAINT batches_endpoint_check;
ALTER TABLE batches ADD CONSTRAINT batches_endpoint_check
    CHECK (endpoint IN ('/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/responses'));
ALTER TABLE worker_endpoints DROP CONSTRAINT worker_endpoints_endpoint_check;
ALTER TABLE worker_endpoints ADD CONSTRAINT worker_endpoints_endpoint_check
    CHECK (endpoint IN ('/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/responses'));

-- @migration 5
-- SQLite's migration 9: fleet economics (see schema.sql).
ALTER TABLE workers ADD COLUMN hourly_cost_micros BIGINT NOT NULL DEFAULT 0;
CREATE TABLE lease_batches (
    lease_id    TEXT NOT NULL,
    batch_id    TEXT NOT NULL,
    n_requests  BIGINT NOT NULL CHECK (n_requests >= 1),
    PRIMARY KEY (lease_id, batch_id)
);
CREATE INDEX lease_batches_batch ON lease_batches(batch_id);
CREATE INDEX leases_worker ON leases(worker_id, created_at);
CREATE INDEX leases_span ON leases((coalesce(released_at, expires_at)));
CREATE INDEX results_lease ON results(lease_id, batch_id);

-- @migration 6
-- batches.api: the contract a batch was created through (SQLite migration 11).
ALTER TABLE batches ADD COLUMN api TEXT NOT NULL DEFAULT 'openai' CHECK (api IN ('openai', 'anthropic'));
CREATE INDEX batches_tenant_api ON batches(tenant_id, api, id);

-- @migration 7
-- Result reuse: SQLite migration 12 (see schema.sql).
ALTER TABLE worker_models ADD COLUMN model_sha256 TEXT NOT NULL DEFAULT '';
ALTER TABLE requests ADD COLUMN reuse_key TEXT;
ALTER TABLE results ADD COLUMN reused_tokens BIGINT NOT NULL DEFAULT 0 CHECK (reused_tokens >= 0);
ALTER TABLE usage_ledger ADD COLUMN reused_tokens BIGINT NOT NULL DEFAULT 0 CHECK (reused_tokens >= 0);
CREATE TABLE reuse_results (
    tenant_id          TEXT NOT NULL,
    reuse_key          TEXT NOT NULL,
    request_id         TEXT NOT NULL,
    status_code        INTEGER NOT NULL,
    body               BYTEA NOT NULL,
    encoding           TEXT NOT NULL DEFAULT 'identity' CHECK (encoding IN ('identity', 'zstd')),
    prompt_tokens      BIGINT NOT NULL DEFAULT 0,
    completion_tokens  BIGINT NOT NULL DEFAULT 0,
    created_at         BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, reuse_key)
);
CREATE INDEX reuse_results_age ON reuse_results(created_at);

-- @migration 8
-- PostgreSQL only: reads whose cost grew with the batch.
-- lease_batches keeps each (lease, batch)'s token sums, added by one
-- statement-level trigger per INSERT into results and taken back per DELETE
-- (transition tables, summed per lease and batch): the fleet's units of a
-- batch (GET /v1/batches/{id}, /v1/fleet) read these rows instead of
-- summing the results rows of every overlapping lease on every call
-- (12 ms a GET on a 20,000-request batch; SQLite keeps the join). Same
-- sums: results rows are inserted and deleted, never updated.
ALTER TABLE lease_batches ADD COLUMN prompt_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN cached_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN completion_tokens BIGINT NOT NULL DEFAULT 0;
UPDATE lease_batches lb SET prompt_tokens = s.pt, cached_tokens = s.cc, completion_tokens = s.ct
    FROM (SELECT lease_id, batch_id, sum(prompt_tokens) AS pt, sum(cached_tokens) AS cc,
                 sum(completion_tokens) AS ct
          FROM results WHERE lease_id IS NOT NULL GROUP BY lease_id, batch_id) s
    WHERE lb.lease_id = s.lease_id AND lb.batch_id = s.batch_id;
CREATE FUNCTION results_lease_sums() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE lease_batches lb SET prompt_tokens = lb.prompt_tokens + s.pt,
            cached_tokens = lb.cached_tokens + s.cc, completion_tokens = lb.completion_tokens + s.ct
        FROM (SELECT lease_id, batch_id, sum(prompt_tokens) AS pt, sum(cached_tokens) AS cc,
                     sum(completion_tokens) AS ct
              FROM results_new WHERE lease_id IS NOT NULL GROUP BY lease_id, batch_id) s
        WHERE lb.lease_id = s.lease_id AND lb.batch_id = s.batch_id;
    ELSE
        UPDATE lease_batches lb SET prompt_tokens = lb.prompt_tokens - s.pt,
            cached_tokens = lb.cached_tokens - s.cc, completion_tokens = lb.completion_tokens - s.ct
        FROM (SELECT lease_id, batch_id, sum(prompt_tokens) AS pt, sum(cached_tokens) AS cc,
                     sum(completion_tokens) AS ct
              FROM results_old WHERE lease_id IS NOT NULL GROUP BY lease_id, batch_id) s
        WHERE lb.lease_id = s.lease_id AND lb.batch_id = s.batch_id;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER results_lease_sums_ins AFTER INSERT ON results REFERENCING NEW TABLE AS results_new
    FOR EACH STATEMENT EXECUTE FUNCTION results_lease_sums();
CREATE TRIGGER results_lease_sums_del AFTER DELETE ON results REFERENCING OLD TABLE AS results_old
    FOR EACH STATEMENT EXECUTE FUNCTION results_lease_sums();
-- The acquire's backlog estimate (BACKLOG_BATCHES: the last 256 ledger rows
-- of a batch, 256 of its requests) as functions that plan without bitmap
-- scans, sequential scans or sorts: right after a burst of inserts the
-- planner's statistics say a batch has a handful of rows, and the bitmap
-- plan it then picks reads every row of the batch before its LIMIT (10 ms
-- an acquire on a 20,000-request batch); the ordered index scans read 256.
CREATE FUNCTION jobd_recent_completion_avg(b TEXT) RETURNS DOUBLE PRECISION LANGUAGE plpgsql STABLE
    SET enable_bitmapscan = off SET enable_seqscan = off SET enable_sort = off AS $$
BEGIN
    RETURN (SELECT avg(x.completion_tokens)::double precision FROM (SELECT u.completion_tokens
            FROM usage_ledger u WHERE u.batch_id = b ORDER BY u.batch_id DESC, u.id DESC LIMIT 256) x);
END $$;
CREATE FUNCTION jobd_max_tokens_avg(b TEXT) RETURNS DOUBLE PRECISION LANGUAGE plpgsql STABLE
    SET enable_bitmapscan = off SET enable_seqscan = off SET enable_sort = off AS $$
BEGIN
    RETURN (SELECT avg(x.max_tokens)::double precision FROM (SELECT q.max_tokens
            FROM requests q WHERE q.batch_id = b LIMIT 256) x);
END $$;
-- Per-row foreign-key checks off the commit's hot inserts: each results row
-- checked its request (an SPI query and a FOR KEY SHARE lock per row, 8 us
-- of a 256-row commit's ~20 us per row) and each ledger row its tenant. A
-- commit inserts results only for the requests it has just ended (their
-- rows locked by its UPDATE) and ledger rows with their batch's tenant,
-- which batches' own foreign key holds; tenants are never deleted. The
-- results' ON DELETE CASCADE becomes one statement per DELETE on requests
-- (a transition table), which batch deletion and a failed or cancelled
-- ingest run.
ALTER TABLE results DROP CONSTRAINT results_request_id_fkey;
ALTER TABLE usage_ledger DROP CONSTRAINT usage_ledger_tenant_id_fkey;
CREATE FUNCTION requests_results_cascade() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM results WHERE request_id IN (SELECT id FROM req_gone);
    RETURN NULL;
END $$;
CREATE TRIGGER requests_results_cascade AFTER DELETE ON requests REFERENCING OLD TABLE AS req_gone
    FOR EACH STATEMENT EXECUTE FUNCTION requests_results_cascade();
-- requests_reserve_stmt (migration 3) joined every row of its transition
-- tables to batches before filtering on budgeted: a commit of 256 requests
-- looked the batch's row up 256 times, walking the chain of versions that
-- the commits' counter updates leave on that one row (81 us of PostgreSQL
-- time per committed request with one worker, against 25 for the claim,
-- whose rows the status filter drops first). Now the batches of the
-- statement are read once: none budgeted (the common case) ends it there,
-- else the rows join those few batches. Same sums.
CREATE OR REPLACE FUNCTION requests_reserve_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM batches WHERE budgeted = 1
                   AND id IN (SELECT DISTINCT batch_id FROM req_new)) THEN
        RETURN NULL;
    END IF;
    WITH bud AS MATERIALIZED (
        SELECT id, reserve_price_in, reserve_price_out FROM batches
        WHERE budgeted = 1 AND id IN (SELECT DISTINCT batch_id FROM req_new))
    UPDATE batches b SET
        reserved_tokens = greatest(0, b.reserved_tokens - d.fin_tokens) + d.re_tokens,
        reserved_micros = greatest(0, b.reserved_micros - d.fin_micros) + d.re_micros
    FROM (SELECT x.batch_id,
                 sum(CASE WHEN x.fin THEN x.tokens ELSE 0 END) AS fin_tokens,
                 sum(CASE WHEN x.fin THEN x.micros ELSE 0 END) AS fin_micros,
                 sum(CASE WHEN x.fin THEN 0 ELSE x.tokens END) AS re_tokens,
                 sum(CASE WHEN x.fin THEN 0 ELSE x.micros END) AS re_micros
          FROM (SELECT n.batch_id, n.prompt_tokens_est + n.max_tokens AS tokens,
                       jobd_reserve_share(n.prompt_tokens_est, n.max_tokens, bb.reserve_price_in,
                                          bb.reserve_price_out) AS micros,
                       o.status IN ('queued', 'leased') AS fin
                FROM req_new n JOIN req_old o ON o.id = n.id
                JOIN bud bb ON bb.id = n.batch_id
                WHERE (o.status IN ('queued', 'leased') AND n.status IN ('succeeded', 'failed'))
                   OR (o.status IN ('succeeded', 'failed') AND n.status IN ('queued', 'leased'))) x
          GROUP BY x.batch_id) d
    WHERE b.id = d.batch_id AND b.budgeted = 1
      AND b.status NOT IN ('completed', 'failed', 'expired', 'cancelled');
    RETURN NULL;
END $$;
-- results.seq without a per-row trigger: the column's default takes the
-- next value of results_seq_gen, and the store locks the result's batch
-- row before it inserts (BATCH_LOCK_MANY before a set-based commit's
-- INSERT, BATCH_LOCK_SEQ before a one-row one), held to commit - the
-- ordering migration 3 describes, without a PL/pgSQL call per row.
ALTER TABLE results ALTER COLUMN seq SET DEFAULT nextval('results_seq_gen');
DROP TRIGGER results_seq_assign ON results;
DROP FUNCTION results_seq_assign();
-- Ingest without a foreign-key check per row: requests.batch_id checked
-- its batch with an SPI query and a FOR KEY SHARE lock on the batch's row
-- for every request inserted (a 100,000-line file: 100,000 locks of one
-- row). Ingest writes only the rows of a batch it owns while that batch is
-- validating (the ingest fence reads the batch row in the same
-- transaction); the ON DELETE CASCADE becomes one statement per DELETE on
-- batches (a transition table), whose deletion of requests then deletes
-- their results (requests_results_cascade above).
ALTER TABLE requests DROP CONSTRAINT requests_batch_id_fkey;
CREATE FUNCTION batches_requests_cascade() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM requests WHERE batch_id IN (SELECT id FROM batches_gone);
    RETURN NULL;
END $$;
CREATE TRIGGER batches_requests_cascade AFTER DELETE ON batches REFERENCING OLD TABLE AS batches_gone
    FOR EACH STATEMENT EXECUTE FUNCTION batches_requests_cascade();

-- @migration 9
-- SQLite's migration 13: fleet history that deleting a batch cannot
-- rewrite (see schema.sql). Migration 8 kept the token sums of each
-- (lease, batch) here but took them back when results rows were deleted,
-- and read the tenant from batches: a batch's deletion re-split the pieces
-- it shared and moved its cost to tenant ''. Now the tenant is copied from
-- the requests when the lease opens, the sums also carry reused_tokens
-- (the fleet view read no reused tokens on PostgreSQL), and a deletion
-- takes nothing back. Parts whose results were deleted before this
-- migration keep the sums migration 8 left them.
ALTER TABLE lease_batches ADD COLUMN tenant_id TEXT NOT NULL DEFAULT '',
    ADD COLUMN reused_tokens BIGINT NOT NULL DEFAULT 0;
UPDATE lease_batches lb SET tenant_id = b.tenant_id FROM batches b WHERE b.id = lb.batch_id;
UPDATE lease_batches lb SET reused_tokens = s.rt
    FROM (SELECT lease_id, batch_id, sum(reused_tokens) AS rt FROM results
          WHERE lease_id IS NOT NULL AND reused_tokens > 0 GROUP BY lease_id, batch_id) s
    WHERE lb.lease_id = s.lease_id AND lb.batch_id = s.batch_id;
DROP TRIGGER results_lease_sums_del ON results;
CREATE OR REPLACE FUNCTION results_lease_sums() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE lease_batches lb SET prompt_tokens = lb.prompt_tokens + s.pt,
        cached_tokens = lb.cached_tokens + s.cc, completion_tokens = lb.completion_tokens + s.ct,
        reused_tokens = lb.reused_tokens + s.rt
    FROM (SELECT lease_id, batch_id, sum(prompt_tokens) AS pt, sum(cached_tokens) AS cc,
                 sum(completion_tokens) AS ct, sum(reused_tokens) AS rt
          FROM results_new WHERE lease_id IS NOT NULL GROUP BY lease_id, batch_id) s
    WHERE lb.lease_id = s.lease_id AND lb.batch_id = s.batch_id;
    RETURN NULL;
END $$;
-- A reused result is inserted with 0 tokens, then marked (REUSE_RESULT_MARK,
-- one row per statement): a row trigger on that column only.
CREATE FUNCTION results_lease_reused() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE lease_batches SET reused_tokens = reused_tokens + NEW.reused_tokens - OLD.reused_tokens
     WHERE lease_id = NEW.lease_id AND batch_id = NEW.batch_id;
    RETURN NULL;
END $$;
CREATE TRIGGER results_lease_reused AFTER UPDATE OF reused_tokens ON results FOR EACH ROW
    WHEN (NEW.lease_id IS NOT NULL AND NEW.reused_tokens <> OLD.reused_tokens)
    EXECUTE FUNCTION results_lease_reused();

-- @migration 10
-- SQLite's migration 14: workers.unpriced and worker_gaps (see schema.sql).
ALTER TABLE workers ADD COLUMN unpriced BIGINT NOT NULL DEFAULT 0 CHECK (unpriced IN (0, 1));
CREATE TABLE worker_gaps (
    worker_id   TEXT NOT NULL,
    gone_at     BIGINT NOT NULL,
    back_at     BIGINT NOT NULL,
    PRIMARY KEY (worker_id, gone_at)
);

-- @migration 11
-- SQLite's migration 15: a worker's longest lease in one index probe.
CREATE INDEX leases_worker_len ON leases(worker_id, (coalesce(released_at, expires_at) - created_at));

-- @migration 12
-- PostgreSQL only: one index entry fewer per claimed request. A claim
-- (queued -> leased) changes indexed columns, so it is not a HOT update:
-- the new row version gets an entry in every index whose predicate it
-- meets, and requests_leased (batch_id) WHERE status = 'leased' held the
-- same rows as requests_lease (lease_id) WHERE lease_id IS NOT NULL (the
-- CHECK on requests makes the two predicates one). Its reads - a batch's
-- leased requests at cancel and expiry, the leased queue depth - use
-- requests_lease now (lease_id IS NOT NULL in their PostgreSQL texts,
-- STORE_SQL_PG). 16.7 -> 12.2 us of server CPU per claimed request in
-- isolation (bench/NOTES.md, 2026-12-07). SQLite keeps its index.
DROP INDEX requests_leased;

-- @migration 13
-- PostgreSQL only: a request's claim (queued -> leased) and its commit
-- (leased -> succeeded/failed) as HOT updates. PostgreSQL updates a row
-- in place on its page, adding no index entry ("heap-only tuple"), only
-- when no indexed column changes - a column of an index's key or of its
-- WHERE - and the page has room for the new version. requests_ready's
-- predicate reads status and requests_lease's key is lease_id, so every
-- claim and every commit wrote a new version into the heap and an entry
-- into each of the table's four indexes (the text keys of the primary
-- key and of (batch_id, custom_id) included), which vacuum then removed:
-- about half of PostgreSQL's buffer reads per committed request
-- (bench/NOTES.md, 2026-12-07). Now no index of requests reads a column
-- that leasing changes:
--   * requests_queued holds one row per request in state queued (inserted
--     with the request at ingest, or when it comes back to queued;
--     deleted by its claim or when it ends queued), keyed for leasing's
--     order: fresh requests (next_attempt_at 0) in line order, then
--     retries as they come due. A claim locks these rows (FOR UPDATE SKIP
--     LOCKED: concurrent acquires skip each other's) and deletes them in
--     the statement that leases the requests;
--   * a lease's requests are listed in its lease_batches rows
--     (request_ids: the ids claimed under it, per batch; NULL once the
--     lease has ended), so expiry, release, heartbeats and cancel find
--     them without an index on requests.lease_id; an id listed there is
--     held only while its request is still leased under that lease;
--   * leases.n_held counts the requests the lease still holds (set when
--     the lease opens, minus one per request leaving leased under it), so
--     a commit learns whether the lease is done without reading them;
--   * requests' fillfactor is 50, so that the page of a row has room for
--     its next version (its previous one is pruned by then).
-- Every statement that changes a request's status keeps these in the same
-- statement (STORE_SQL_PG: REQ_TRANSITION, LEASE_CLAIM_MANY,
-- REQ_FINISH_MANY, REQ_INSERT_MANY); deleting requests deletes their
-- requests_queued rows (requests_results_cascade). Invariants:
-- requests_queued has exactly the queued requests; for a lease not
-- released, n_held = its requests in state leased, each listed in its
-- lease_batches.request_ids. SQLite keeps requests_ready and
-- requests_lease (one writer, no MVCC versions).
CREATE TABLE requests_queued (
    batch_id         TEXT NOT NULL,    -- requests.batch_id
    next_attempt_at  BIGINT NOT NULL,  -- requests.next_attempt_at (unix seconds; 0 for a fresh request)
    line             BIGINT NOT NULL,  -- requests.line
    request_id       TEXT NOT NULL     -- requests.id
);
CREATE INDEX requests_queued_ready ON requests_queued(batch_id, next_attempt_at, line);
INSERT INTO requests_queued(batch_id, next_attempt_at, line, request_id)
    SELECT batch_id, next_attempt_at, line, id FROM requests WHERE status = 'queued';
ALTER TABLE leases ADD COLUMN n_held BIGINT NOT NULL DEFAULT 0;
ALTER TABLE lease_batches ADD COLUMN request_ids TEXT[];
INSERT INTO lease_batches(lease_id, batch_id, tenant_id, n_requests, request_ids)
    SELECT lease_id, batch_id, min(tenant_id), count(*), array_agg(id ORDER BY id) FROM requests
    WHERE status = 'leased' GROUP BY lease_id, batch_id
    ON CONFLICT (lease_id, batch_id) DO UPDATE SET request_ids = excluded.request_ids;
UPDATE leases l SET n_held = s.n FROM (SELECT lease_id, count(*) AS n FROM requests
    WHERE status = 'leased' GROUP BY lease_id) s WHERE l.id = s.lease_id;
DROP INDEX requests_ready;
DROP INDEX requests_lease;
ALTER TABLE requests SET (fillfactor = 50);
-- A batch's ready requests for a lease (LEASE_READY), in a function that
-- plans only the ordered walk of requests_queued_ready (and reads the
-- worker's model names once, not per row): right after a burst
-- of inserts the statistics say a batch has a few dozen queued rows, and the
-- plan then chosen read every one of them (a bitmap scan, a join with
-- requests, a sort) before its LIMIT - 20,000 rows and 100,000 buffers for
-- 256 ready requests (as jobd_recent_completion_avg, migration 8).
CREATE FUNCTION jobd_lease_ready(b TEXT, due BIGINT, n BIGINT, w TEXT, m TEXT)
    RETURNS TABLE(id TEXT, custom_id TEXT, body TEXT, attempts BIGINT, prompt_tokens_est BIGINT,
                  max_tokens BIGINT)
    LANGUAGE plpgsql VOLATILE SET enable_bitmapscan = off SET enable_seqscan = off
    SET enable_sort = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
BEGIN
    RETURN QUERY SELECT r.id, r.custom_id, r.body, r.attempts, r.prompt_tokens_est, r.max_tokens
        FROM requests_queued x JOIN requests r ON r.id = x.request_id
        WHERE x.batch_id = b AND x.next_attempt_at <= due
          AND r.model = ANY(ARRAY(SELECT wm.name FROM worker_models wm WHERE wm.worker_id = w
                                  AND wm.canonical = m))
        ORDER BY x.next_attempt_at, x.line LIMIT n FOR UPDATE OF x SKIP LOCKED;
END $$;
CREATE OR REPLACE FUNCTION requests_results_cascade() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM results WHERE request_id IN (SELECT id FROM req_gone);
    DELETE FROM requests_queued x USING req_gone g WHERE g.status = 'queued'
        AND x.batch_id = g.batch_id AND x.next_attempt_at = g.next_attempt_at AND x.line = g.line
        AND x.request_id = g.id;
    RETURN NULL;
END $$;

-- @migration 14
-- Ids compare byte by byte (COLLATE "C"), as SQLite's BINARY does: every
-- text key of an index - a request's, batch's, lease's, file's id, the
-- *_id columns that point at them, custom_id, model names, idempotency
-- and reuse keys - was compared under the
-- database's own collation (strcoll: C.UTF-8 in the tests, often
-- en_US.UTF-8 in the field), ~5% of the server's CPU on the lease+commit
-- path in perf (varstr_cmp, strcoll, the locale lookups; bench/NOTES.md).
-- The order of ids jobd makes (ASCII tokens) is the same under both; a
-- listing ordered by another key (a model name, a custom_id) now orders as
-- on SQLite; a comparison of a C column with a parameter or a
-- default-collated column resolves to C (PostgreSQL's collation rules),
-- so every statement keeps its meaning and its indexes. One ALTER per
-- table, so each table's indexes are rebuilt once. A trigger whose WHEN
-- reads such a column is dropped meanwhile (PostgreSQL refuses the ALTER).
DROP TRIGGER results_lease_reused ON results;
DO $$
DECLARE t record;
BEGIN
    FOR t IN SELECT c.table_name,
                    string_agg(format('ALTER COLUMN %I TYPE text COLLATE "C"', c.column_name), ', ') AS alters
             FROM information_schema.columns c
             JOIN information_schema.tables tb ON tb.table_schema = c.table_schema
                  AND tb.table_name = c.table_name AND tb.table_type = 'BASE TABLE'
             WHERE c.table_schema = current_schema() AND c.data_type = 'text' AND c.collation_name IS NULL
               AND (c.column_name IN ('id', 'custom_id', 'model', 'canonical', 'key', 'reuse_key')
                    OR c.column_name LIKE '%\_id')
             GROUP BY c.table_name
    LOOP
        EXECUTE format('ALTER TABLE %I %s', t.table_name, t.alters);
    END LOOP;
END $$;
CREATE TRIGGER results_lease_reused AFTER UPDATE OF reused_tokens ON results FOR EACH ROW
    WHEN (NEW.lease_id IS NOT NULL AND NEW.reused_tokens <> OLD.reused_tokens)
    EXECUTE FUNCTION results_lease_reused();

-- @migration 15
-- requests_reserve_stmt's work moves into the two statements that can end
-- a request or bring one back (REQ_FINISH_MANY, REQ_TRANSITION:
-- store_int.h, STORE_PG_RESERVE), same sums. A trigger with
-- transition tables makes PostgreSQL copy the old and the new version of
-- every row of every UPDATE of requests - each claim and each commit, of
-- budgeted batches or not - into two tuple stores and join them, for
-- nothing in the common case: 2-3 us of server CPU per committed request
-- (bench/NOTES.md).
DROP TRIGGER requests_reserve ON requests;
DROP FUNCTION requests_reserve_stmt();
-- A lease's id list (~8 KB for 256 requests) is stored out of line
-- uncompressed: ids do not compress (pglz spent ~1.5% of the server's CPU
-- on the lease+commit path trying, perf).
ALTER TABLE lease_batches ALTER COLUMN request_ids SET STORAGE EXTERNAL;
