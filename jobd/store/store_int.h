/*
 * store_int.h - internals shared by the jobd/store*.c files (not an API).
 *
 * Every SQL statement the store runs is in STORE_SQL below, so the queries
 * and the indexes in schema.sql can be read side by side. Statements are
 * prepared on first use (store_stmt) and kept in st->stmts until
 * store_close; a fetched statement is already reset and unbound.
 *
 * Write helpers: store_w_begin opens BEGIN IMMEDIATE at depth 0 and a
 * SAVEPOINT inside an open transaction; store_w_end commits / releases on
 * rc == 0 and rolls back (to the savepoint) otherwise, returning rc or the
 * commit's error. store_r_begin / store_r_end do the same for a read that
 * must see one snapshot (a deferred BEGIN, or a SAVEPOINT when nested).
 * No file of the store runs SQL text of its own: every statement, the
 * transaction control included, is an entry of STORE_SQL.
 */
#ifndef JOBD_STORE_INT_H
#define JOBD_STORE_INT_H

#include "jobd/store/sdb.h"

#include "jobd/store/store.h"

/* Columns read into struct store_batch, in this order (store_batch_row). */
#define STORE_BATCH_COLS                                                                    \
    "id, tenant_id, endpoint, input_file_id, completion_window_s, status, model, metadata, " \
    "errors, output_file_id, error_file_id, n_total, n_completed, n_failed, created_at, "    \
    "expires_at, in_progress_at, finalizing_at, completed_at, failed_at, expired_at, "       \
    "cancelling_at, cancelled_at, ingest_line, ingest_requests, priority, usage_prompt_tokens, " \
    "usage_completion_tokens, usage_cached_tokens, usage_cost_micros, output_expires_after_s, api"

#define STORE_FILE_COLS                                                                   \
    "id, tenant_id, purpose, filename, bytes, sha256, storage_path, encoding, status, "  \
    "created_at, expires_at"

#define STORE_SQL(X)                                                                          \
    X(BEGIN, "BEGIN IMMEDIATE")                                                               \
    X(BEGIN_READ, "BEGIN")                                                                    \
    X(COMMIT, "COMMIT")                                                                       \
    X(ROLLBACK, "ROLLBACK")                                                                   \
    X(SAVEPOINT, "SAVEPOINT w")                                                               \
    X(RELEASE, "RELEASE w")                                                                   \
    X(ROLLBACK_TO, "ROLLBACK TO w")                                                           \
    X(USER_VERSION, "PRAGMA user_version")                                                    \
    X(OWN_TRY, "SELECT 1") /* PostgreSQL only: store_own_try */                                \
    X(OWN_RELEASE, "SELECT 1") /* PostgreSQL only: store_own_release */                        \
    X(TENANT_INSERT, "INSERT INTO tenants(id, name, created_at) VALUES (?1, ?2, ?3)")         \
    X(TENANT_BY_NAME, "SELECT id, name, created_at FROM tenants WHERE name = ?1")             \
    X(TENANT_BY_ID, "SELECT id, name, created_at FROM tenants WHERE id = ?1")                 \
    X(KEY_INSERT, "INSERT INTO api_keys(id, tenant_id, secret_hash, created_at) "             \
                  "VALUES (?1, ?2, ?3, ?4)")                                                  \
    X(KEY_LOOKUP, "SELECT k.tenant_id, k.secret_hash, k.created_at, t.name FROM api_keys k "  \
                  "JOIN tenants t ON t.id = k.tenant_id WHERE k.id = ?1 AND k.revoked_at IS NULL") \
    X(KEY_LIST, "SELECT k.id, k.tenant_id, t.name, k.created_at, k.revoked_at FROM api_keys k " \
                "JOIN tenants t ON t.id = k.tenant_id WHERE ?1 IS NULL OR k.tenant_id = ?1 "  \
                "ORDER BY k.created_at, k.id")                                                \
    X(KEY_REVOKE, "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1")  \
    X(FILE_INSERT, "INSERT INTO files(" STORE_FILE_COLS ") VALUES "                           \
                   "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)")                          \
    X(FILE_GET, "SELECT " STORE_FILE_COLS " FROM files WHERE id = ?1 AND tenant_id = ?2")     \
    X(FILE_LIST_DESC, "SELECT " STORE_FILE_COLS " FROM files WHERE tenant_id = ?1 "           \
                      "AND (?2 IS NULL OR purpose = ?2) AND (?3 IS NULL OR id < ?3) "         \
                      "ORDER BY id DESC LIMIT ?4")                                            \
    X(FILE_LIST_ASC, "SELECT " STORE_FILE_COLS " FROM files WHERE tenant_id = ?1 "            \
                     "AND (?2 IS NULL OR purpose = ?2) AND (?3 IS NULL OR id > ?3) "          \
                     "ORDER BY id ASC LIMIT ?4")                                              \
    X(FILE_DELETE, "DELETE FROM files WHERE id = ?1 AND tenant_id = ?2 RETURNING storage_path") \
    X(FILE_EXPIRED, "SELECT id, storage_path FROM files WHERE expires_at IS NOT NULL AND "    \
                    "expires_at <= ?1 AND NOT EXISTS (SELECT 1 FROM batches b WHERE "         \
                    "b.status = 'validating' AND b.input_file_id = files.id) "                \
                    "ORDER BY expires_at LIMIT ?2")                                           \
    X(FILE_NAMED, "SELECT 1 FROM files WHERE storage_path = ?1 LIMIT 1")                      \
    X(FILE_EXISTS, "SELECT 1 FROM files WHERE id = ?1")                                       \
    X(FILE_PURGE, "DELETE FROM files WHERE id = ?1 AND expires_at IS NOT NULL AND "            \
                  "expires_at <= ?2")                                                         \
    X(BATCH_INSERT, "INSERT INTO batches(id, tenant_id, endpoint, input_file_id, "            \
                    "completion_window_s, status, metadata, created_at, expires_at, priority, "  \
                    "output_expires_after_s, api) "                                               \
                    "VALUES (?1, ?2, ?3, ?4, ?5, 'validating', ?6, ?7, ?8, ?9, ?10, ?11)")        \
    X(BATCH_GET, "SELECT " STORE_BATCH_COLS " FROM batches WHERE id = ?1 "                    \
                 "AND (?2 IS NULL OR tenant_id = ?2)")                                        \
    X(BATCH_LIST, "SELECT " STORE_BATCH_COLS " FROM batches WHERE tenant_id = ?1 "            \
                  "AND (?2 IS NULL OR id < ?2) AND (?4 IS NULL OR status = ?4) "             \
                  "ORDER BY id DESC LIMIT ?3")                                              \
    X(BATCH_LIST_API, "SELECT " STORE_BATCH_COLS " FROM batches WHERE tenant_id = ?1 "        \
                      "AND api = ?4 AND (?2 IS NULL OR id < ?2) ORDER BY id DESC LIMIT ?3")   \
    X(BATCH_LIST_API_ASC, "SELECT " STORE_BATCH_COLS " FROM batches WHERE tenant_id = ?1 "    \
                          "AND api = ?4 AND id > ?2 ORDER BY id ASC LIMIT ?3")                \
    X(BATCH_STOP_COUNTS, "SELECT error_code, count(*) FROM results WHERE batch_id = ?1 AND "  \
                         "error_code IN ('batch_cancelled', 'batch_expired') GROUP BY error_code") \
    X(BATCH_DELETE, "DELETE FROM batches WHERE id = ?1 AND tenant_id = ?2 AND api = ?3 AND "  \
                    "status IN ('completed', 'failed', 'expired', 'cancelled')")              \
    X(BATCH_IDS_IN, "SELECT id FROM batches WHERE status = ?1 ORDER BY id")                   \
    X(BATCH_STATUS_COUNTS, "SELECT status, count(*) FROM batches GROUP BY status")            \
    X(BATCH_EXISTS, "SELECT status FROM batches WHERE id = ?1")                               \
    X(BATCH_TRANSITION,                                                                       \
      "UPDATE batches SET status = ?2, "                                                      \
      "in_progress_at = CASE WHEN ?2 = 'in_progress' THEN ?4 ELSE in_progress_at END, "       \
      "finalizing_at = CASE WHEN ?2 = 'finalizing' THEN ?4 ELSE finalizing_at END, "          \
      "completed_at = CASE WHEN ?2 = 'completed' THEN ?4 ELSE completed_at END, "             \
      "failed_at = CASE WHEN ?2 = 'failed' THEN ?4 ELSE failed_at END, "                      \
      "expired_at = CASE WHEN ?2 = 'expired' THEN ?4 ELSE expired_at END, "                   \
      "cancelling_at = CASE WHEN ?2 = 'cancelling' THEN ?4 ELSE cancelling_at END, "          \
      "cancelled_at = CASE WHEN ?2 = 'cancelled' THEN ?4 ELSE cancelled_at END "              \
      "WHERE id = ?1 AND status = ?3")                                                        \
    X(BATCH_COUNT_DONE, "UPDATE batches SET n_completed = n_completed + ?2, "                 \
                        "n_failed = n_failed + ?3 WHERE id = ?1")                             \
    X(INGEST_CHECKPOINT, "UPDATE batches SET ingest_line = ?2, ingest_requests = ?3, "        \
                         "errors = ?4, model = ?5 WHERE id = ?1 AND status = 'validating'")               \
    X(INGEST_FENCE, "SELECT ingest_line FROM batches WHERE id = ?1 AND status = 'validating'")   \
    X(INGEST_TOTAL, "UPDATE batches SET n_total = (SELECT count(*) FROM requests "            \
                    "WHERE batch_id = ?1), ingest_requests = (SELECT count(*) FROM requests " \
                    "WHERE batch_id = ?1), model = ?2 WHERE id = ?1 AND status = 'validating'") \
    X(BATCH_MODELS_FILL, "INSERT INTO batch_models(batch_id, model, n_requests) SELECT batch_id, " \
                         "model, count(*) FROM requests WHERE batch_id = ?1 GROUP BY model " \
                         "ON CONFLICT (batch_id, model) DO NOTHING") \
    X(INGEST_ERRORS, "UPDATE batches SET errors = ?2, n_total = 0, ingest_requests = 0 "      \
                     "WHERE id = ?1")                                                         \
    X(REQ_DELETE_BATCH, "DELETE FROM requests WHERE batch_id = ?1")                           \
    X(REQ_INSERT, "INSERT INTO requests(id, batch_id, tenant_id, line, custom_id, model, body, " \
                  "prompt_tokens_est, max_tokens, created_at, updated_at) "                   \
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10) "                    \
                  "ON CONFLICT (batch_id, custom_id) DO NOTHING")                             \
    X(REQ_DUP_LINE, "SELECT line FROM requests WHERE batch_id = ?1 AND custom_id = ?2")       \
    X(REQ_GET, "SELECT id, batch_id, line, custom_id, model, status, attempts, "              \
               "next_attempt_at, lease_id, prompt_tokens_est, max_tokens FROM requests "      \
               "WHERE id = ?1")                                                               \
    X(REQ_COUNT, "SELECT count(*), count(DISTINCT custom_id) FROM requests WHERE batch_id = ?1") \
    X(REQ_RERUN_SCAN,                                                                         \
      "SELECT q.line, q.custom_id, q.body FROM requests q LEFT JOIN results r ON "            \
      "r.request_id = q.id WHERE q.batch_id = ?1 AND (?2 = 2 OR ((r.status_code IS NULL OR "  \
      "r.status_code NOT BETWEEN 200 AND 299) AND (?2 = 1 OR (r.request_id IS NOT NULL AND "  \
      "coalesce(r.error_code, '') NOT IN ('batch_expired', 'batch_cancelled'))))) "           \
      "ORDER BY q.line")                                                                      \
    X(REQ_TRANSITION,                                                                         \
      "UPDATE requests SET status = ?2, updated_at = ?5, "                                    \
      "attempts = CASE WHEN ?3 = 'failed' THEN 0 ELSE attempts + (?2 = 'leased') - ?9 END, "                                               \
      "lease_id = CASE WHEN ?2 = 'leased' THEN ?6 ELSE NULL END, "                            \
      "reuse_key = CASE WHEN ?2 = 'leased' THEN NULL ELSE reuse_key END, "                    \
      "next_attempt_at = CASE WHEN ?2 = 'queued' THEN ?7 ELSE next_attempt_at END, "          \
      "last_error = coalesce(?8, last_error), "                                               \
      "finished_at = CASE WHEN ?2 IN ('succeeded', 'failed') THEN ?5 ELSE NULL END "          \
      "WHERE id = ?1 AND status = ?3 AND (?4 IS NULL OR lease_id = ?4) "                      \
      "RETURNING batch_id")                                                                   \
    X(IDEM_GET, "SELECT fingerprint, status_code, response, created_at FROM idempotency_keys " \
                "WHERE tenant_id = ?1 AND key = ?2")                                          \
    X(IDEM_PUT, "INSERT OR REPLACE INTO idempotency_keys(tenant_id, key, fingerprint, "       \
                "created_at) VALUES (?1, ?2, ?3, ?4)")                                        \
    X(IDEM_COMPLETE, "UPDATE idempotency_keys SET status_code = ?3, response = ?4, "          \
                     "completed_at = ?5 WHERE tenant_id = ?1 AND key = ?2 "                   \
                     "AND status_code IS NULL")                                               \
    X(IDEM_RELEASE, "DELETE FROM idempotency_keys WHERE tenant_id = ?1 AND key = ?2 "         \
                    "AND status_code IS NULL")                                                \
    X(IDEM_EXPIRE, "DELETE FROM idempotency_keys WHERE created_at <= ?1") \
    X(WORKER_INSERT, \
      "INSERT INTO workers(id, name, device, kv_tokens, pack_size, registered_at, " \
      "last_seen, hourly_cost_micros, unpriced) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8)") \
    X(WORKER_MODEL_INSERT, \
      "INSERT OR IGNORE INTO worker_models(worker_id, canonical, name, model_sha256) VALUES (?1, " \
      "?2, ?3, ?4)") \
    X(WORKER_SEEN, \
      "UPDATE workers SET last_seen = max(last_seen, ?2), tokens_per_s = CASE WHEN ?3 " \
      ">= 0 THEN ?3 ELSE tokens_per_s END WHERE id = ?1") \
    X(WORKER_GAP_NOTE, \
      "INSERT INTO worker_gaps(worker_id, gone_at, back_at) SELECT id, last_seen, ?2 FROM " \
      "workers WHERE id = ?1 AND last_seen < ?2 - ?3 ON CONFLICT DO NOTHING") \
    X(WORKER_ENDPOINT_INSERT, \
      "INSERT OR IGNORE INTO worker_endpoints(worker_id, canonical, endpoint) VALUES " \
      "(?1, ?2, ?3)") \
    X(WORKER_HAS_MODEL, "SELECT count(*) FROM worker_models WHERE worker_id = ?1 AND canonical = ?2") \
    X(MODELS_SERVED, \
      "SELECT m.name, m.canonical, count(DISTINCT w.id), COALESCE((SELECT sum(x.bit) FROM " \
      "(SELECT DISTINCT CASE e.endpoint WHEN '/v1/chat/completions' THEN 1 WHEN " \
      "'/v1/completions' THEN 2 WHEN '/v1/embeddings' THEN 4 ELSE 8 END AS bit FROM " \
      "worker_endpoints e JOIN workers w2 ON " \
      "w2.id = e.worker_id JOIN worker_models m2 ON m2.worker_id = e.worker_id AND " \
      "m2.canonical = e.canonical WHERE m2.name = m.name AND m2.canonical = m.canonical AND " \
      "w2.last_seen >= ?1) x), 0) FROM worker_models m JOIN " \
      "workers w ON w.id = m.worker_id WHERE w.last_seen >= ?1 GROUP BY m.name, " \
      "m.canonical ORDER BY m.name, m.canonical") \
    X(MODELS_WAITING, \
      "SELECT x.m, count(*) FROM (SELECT b.model AS m, b.endpoint AS ep FROM batches b " \
      "WHERE b.status = 'in_progress' AND b.model != 'mixed' UNION ALL SELECT bm.model, " \
      "b.endpoint FROM batches b JOIN batch_models bm ON bm.batch_id = b.id WHERE b.status " \
      "= 'in_progress' AND b.model = 'mixed') x WHERE NOT EXISTS (SELECT 1 FROM " \
      "worker_models m JOIN workers w ON w.id = m.worker_id JOIN worker_endpoints e ON " \
      "e.worker_id = m.worker_id AND e.canonical = m.canonical AND e.endpoint = x.ep WHERE " \
      "m.name = x.m AND w.last_seen >= ?1) GROUP BY x.m ORDER BY x.m") \
    X(LEASE_CANDIDATES, \
      "SELECT b.id, b.tenant_id, b.priority, b.expires_at FROM batches b WHERE " \
      "b.status = 'in_progress' AND b.expires_at > ?3 AND (b.model IN (SELECT name FROM " \
      "worker_models WHERE worker_id = ?1 AND canonical = ?2) OR (b.model = 'mixed' AND " \
      "EXISTS (SELECT 1 FROM batch_models bm WHERE bm.batch_id = b.id AND bm.model IN " \
      "(SELECT name FROM worker_models WHERE worker_id = ?1 AND canonical = ?2)))) " \
      "AND b.endpoint IN (SELECT endpoint FROM worker_endpoints WHERE worker_id = ?1 AND " \
      "canonical = ?2) " \
      "ORDER BY b.tenant_id, b.priority DESC, b.expires_at, b.id") \
    X(LEASE_READY, \
      "SELECT id, custom_id, body, attempts, prompt_tokens_est, max_tokens FROM " \
      "requests WHERE batch_id = ?1 AND status = 'queued' AND next_attempt_at <= ?2 " \
      "AND model IN (SELECT name FROM worker_models WHERE worker_id = ?4 AND canonical = ?5) " \
      "ORDER BY next_attempt_at LIMIT ?3") \
    X(BACKLOG_BATCHES, \
      "SELECT b.id, b.priority, b.expires_at, b.n_total - b.n_completed - b.n_failed, " \
      "(SELECT avg(completion_tokens) FROM (SELECT u.completion_tokens FROM usage_ledger u " \
      "WHERE u.batch_id = b.id ORDER BY u.id DESC LIMIT 256)), (SELECT avg(max_tokens) " \
      "FROM (SELECT q.max_tokens FROM requests q WHERE q.batch_id = b.id LIMIT 256)) " \
      "FROM batches b WHERE b.tenant_id = ?1 AND b.model = ?2 AND b.status = 'in_progress'") \
    X(BACKLOG_TPS, \
      "SELECT COALESCE(SUM(w.tokens_per_s), 0) FROM workers w WHERE w.last_seen >= ?2 AND " \
      "EXISTS (SELECT 1 FROM worker_models m WHERE m.worker_id = w.id AND m.name = ?1)") \
    X(BACKLOG_TENANTS, \
      "SELECT count(DISTINCT tenant_id) FROM batches WHERE status = 'in_progress' AND " \
      "model = ?1 AND n_completed + n_failed < n_total") \
    X(RR_GET, "SELECT last_tenant_id FROM lease_rr WHERE model = ?1") \
    X(RR_PUT, \
      "INSERT INTO lease_rr(model, last_tenant_id) VALUES (?1, ?2) ON CONFLICT " \
      "(model) DO UPDATE SET last_tenant_id = excluded.last_tenant_id") \
    X(LEASE_INSERT, \
      "INSERT INTO leases(id, worker_id, model, n_requests, created_at, expires_at) " \
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)") \
    X(LEASE_BATCHES_FILL, \
      "INSERT INTO lease_batches(lease_id, batch_id, tenant_id, n_requests) SELECT ?1, " \
      "batch_id, min(tenant_id), count(*) FROM requests WHERE lease_id = ?1 GROUP BY batch_id") \
    X(LEASE_GET, "SELECT worker_id, expires_at, released_at FROM leases WHERE id = ?1") \
    X(LEASE_EXTEND, \
      "UPDATE leases SET expires_at = max(expires_at, ?2) WHERE id = ?1 AND " \
      "released_at IS NULL RETURNING expires_at") \
    X(LEASE_STOP_IDS, \
      "SELECT q.id FROM requests q JOIN batches b ON b.id = q.batch_id WHERE " \
      "q.lease_id = ?1 AND q.status = 'leased' AND (b.status != 'in_progress' OR " \
      "b.expires_at <= ?2) UNION SELECT request_id FROM results WHERE lease_id = ?1 " \
      "AND error_code IN ('batch_cancelled', 'batch_expired') ORDER BY 1") \
    X(LEASE_HELD, \
      "SELECT id FROM requests WHERE lease_id = ?1 AND status = 'leased' ORDER BY batch_id, id " \
      "LIMIT ?2") \
    X(LEASE_END_IF_EMPTY, \
      "UPDATE leases SET released_at = ?2 WHERE id = ?1 AND released_at IS NULL AND NOT EXISTS " \
      "(SELECT 1 FROM requests WHERE lease_id = ?1 AND status = 'leased')") \
    /* PostgreSQL only (STORE_SQL_PG), the set-based hot paths: */ \
    X(LEASE_CLAIM_MANY, "SELECT 1") \
    X(REQ_FOR_COMMIT_MANY, "SELECT 1") \
    X(REQ_FINISH_MANY, "SELECT 1") \
    X(RESULT_INSERT_MANY, "SELECT 1") \
    X(USAGE_INSERT_MANY, "SELECT 1") \
    X(BATCH_LOCK_MANY, "SELECT 1") \
    X(BATCH_LOCK_IDS, "SELECT 1") \
    X(REQ_INSERT_MANY, "SELECT 1") \
    X(BATCH_LOCK_SEQ, "SELECT 1") \
    X(NOTIFY_WORK, "SELECT 1") \
    X(LEASE_END, "UPDATE leases SET released_at = ?2 WHERE id = ?1 AND released_at IS NULL") \
    X(LEASE_EXPIRED, \
      "SELECT id FROM leases WHERE released_at IS NULL AND expires_at <= ?1 ORDER BY " \
      "expires_at LIMIT ?2") \
    X(REQ_FOR_COMMIT, \
      "SELECT q.status, q.lease_id, q.attempts, q.batch_id, q.tenant_id, q.model, " \
      "b.status, b.expires_at, r.lease_id, r.error_code, r.request_id FROM requests q " \
      "JOIN batches b ON b.id = q.batch_id LEFT JOIN results r ON r.request_id = q.id " \
      "WHERE q.id = ?1") \
    X(RESULT_INSERT, \
      "INSERT INTO results(request_id, batch_id, lease_id, status_code, body, " \
      "error_code, error_message, prompt_tokens, completion_tokens, cached_tokens, " \
      "queue_ms, prefill_ms, decode_ms, gpu_ms, created_at) VALUES (?1, ?2, ?3, ?4, " \
      "?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)") \
    X(USAGE_INSERT, \
      "INSERT INTO usage_ledger(tenant_id, batch_id, request_id, model, " \
      "prompt_tokens, completion_tokens, cached_tokens, cost_micros, created_at) " \
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?9, ?8)") \
    X(DL_INSERT, \
      "INSERT INTO dead_letters(request_id, batch_id, tenant_id, custom_id, attempts, " \
      "reason, last_error, line, created_at) SELECT q.id, q.batch_id, q.tenant_id, " \
      "q.custom_id, q.attempts, ?2, ?3, json_object('custom_id', q.custom_id, " \
      "'method', 'POST', 'url', b.endpoint, 'body', json(q.body)), ?4 FROM requests q " \
      "JOIN batches b ON b.id = q.batch_id WHERE q.id = ?1") \
    X(BATCH_QUEUED_IDS, \
      "SELECT id, lease_id FROM requests WHERE batch_id = ?1 AND status = 'queued' " \
      "LIMIT ?2") \
    X(BATCH_LEASED_IDS, \
      "SELECT id, lease_id FROM requests WHERE batch_id = ?1 AND status = 'leased' " \
      "LIMIT ?2") \
    X(DL_COLS_LIST_BATCH, \
      "SELECT request_id, batch_id, tenant_id, custom_id, attempts, reason, " \
      "last_error, line, created_at FROM dead_letters WHERE batch_id = ?1 AND (?2 IS " \
      "NULL OR tenant_id = ?2) AND (?3 IS NULL OR request_id > ?3) ORDER BY " \
      "request_id LIMIT ?4") \
    X(DL_COLS_LIST_ALL, \
      "SELECT request_id, batch_id, tenant_id, custom_id, attempts, reason, " \
      "last_error, line, created_at FROM dead_letters WHERE (?2 IS NULL OR tenant_id " \
      "= ?2) AND (?3 IS NULL OR request_id > ?3) AND ?1 IS NULL ORDER BY request_id " \
      "LIMIT ?4") \
    X(DL_GET, \
      "SELECT d.batch_id, b.status, b.expires_at FROM dead_letters d JOIN batches b " \
      "ON b.id = d.batch_id WHERE d.request_id = ?1 AND (?2 IS NULL OR d.tenant_id = " \
      "?2)") \
    X(DL_DELETE, "DELETE FROM dead_letters WHERE request_id = ?1") \
    X(RESULT_DELETE, "DELETE FROM results WHERE request_id = ?1") \
    X(RESULTS_SCAN, \
      "SELECT r.seq, r.request_id, q.custom_id, r.status_code, r.body, " \
      "r.error_code, r.error_message, r.prompt_tokens, r.completion_tokens, " \
      "r.cached_tokens FROM results r JOIN requests q ON q.id = r.request_id WHERE " \
      "r.batch_id = ?1 AND r.seq > ?2 ORDER BY r.seq LIMIT ?3") \
    X(FINALIZE_IDS, \
      "SELECT id FROM batches WHERE (status = 'in_progress' AND (expires_at <= ?1 OR " \
      "n_completed + n_failed >= n_total)) OR status = 'finalizing' OR (status = " \
      "'cancelling' AND in_progress_at IS NOT NULL) ORDER BY id LIMIT ?2") \
    X(BATCH_HAS_LEASED, "SELECT 1 FROM requests WHERE batch_id = ?1 AND status = 'leased' LIMIT 1") \
    X(BATCH_STATE, "SELECT status, expires_at, in_progress_at FROM batches WHERE id = ?1") \
    X(BATCH_FINISH, \
      "UPDATE batches SET output_file_id = ?2, error_file_id = ?3, n_completed = ?4, " \
      "n_failed = ?5, usage_prompt_tokens = ?6, usage_completion_tokens = ?7, " \
      "usage_cached_tokens = ?8, usage_cost_micros = (SELECT COALESCE(SUM(cost_micros), 0) " \
      "FROM usage_ledger WHERE batch_id = ?1) WHERE id = ?1") \
    STORE_SQL_ACCOUNT(X) \
    STORE_SQL_REUSE(X) \
    STORE_SQL_ADMIN(X) \
    STORE_SQL_FLEET(X, "min", "?3", "?4", "CROSS JOIN", STORE_FLEET_UNITS) \
    STORE_SQL_FLEET_BATCH(X, "min", "?2", "CROSS JOIN", STORE_FLEET_UNITS)

/* Result reuse (store_reuse.c, jobd/work/reuse.h). One text for both
 * dialects: ON CONFLICT DO NOTHING and CAST(?N AS TEXT) (a NULL that
 * PostgreSQL must type) read the same in SQLite. REUSE_RECORD keeps, per
 * (tenant, key), the first computed 2xx result committed under a lease
 * (reused_tokens = 0: a reused answer is never recorded again). */
#define STORE_SQL_REUSE(X) \
    X(REUSE_WORKER, \
      "SELECT m.model_sha256, w.device FROM worker_models m JOIN workers w ON w.id = " \
      "m.worker_id WHERE m.worker_id = ?1 AND m.canonical = ?2 AND m.name = ?2") \
    X(REUSE_GET, \
      "SELECT status_code, body, encoding, prompt_tokens, completion_tokens FROM " \
      "reuse_results WHERE tenant_id = ?1 AND reuse_key = ?2 AND created_at >= ?3") \
    X(REUSE_KEY_SET, \
      "UPDATE requests SET reuse_key = CAST(?2 AS TEXT) WHERE id = ?1 AND lease_id = ?3") \
    X(REUSE_RECORD, \
      "INSERT INTO reuse_results(tenant_id, reuse_key, request_id, status_code, body, encoding, " \
      "prompt_tokens, completion_tokens, created_at) SELECT q.tenant_id, q.reuse_key, q.id, " \
      "r.status_code, r.body, r.encoding, r.prompt_tokens, r.completion_tokens, r.created_at " \
      "FROM results r JOIN requests q ON q.id = r.request_id WHERE r.lease_id = ?1 AND " \
      "r.created_at = ?2 AND q.reuse_key IS NOT NULL AND r.reused_tokens = 0 AND " \
      "r.status_code >= 200 AND r.status_code < 300 AND r.body IS NOT NULL " \
      "ON CONFLICT DO NOTHING") \
    X(REUSE_RESULT_MARK, "UPDATE results SET reused_tokens = ?2 WHERE request_id = ?1") \
    X(REUSE_LEDGER_MARK, "UPDATE usage_ledger SET reused_tokens = ?2 WHERE request_id = ?1") \
    X(REUSE_EXPIRE, "DELETE FROM reuse_results WHERE created_at < ?1")

/* Budgets and usage reports (store_budget.c, store_usage.c). */
#define STORE_USAGE_SUMS \
    "COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0), " \
    "COALESCE(SUM(cached_tokens), 0), COUNT(*), COALESCE(SUM(cost_micros), 0), " \
    "COALESCE(SUM(reused_tokens), 0), COALESCE(SUM(CASE WHEN reused_tokens > 0 THEN 1 ELSE 0 END), 0)"
#define STORE_USAGE_RANGE \
    "WHERE (?1 IS NULL OR tenant_id = ?1) AND created_at >= ?2 AND created_at < ?3 " \
    "AND (?5 IS NULL OR batch_id = ?5)"
#define STORE_USAGE_GROUPED(key) \
    "SELECT " key " AS k, MIN(created_at), " STORE_USAGE_SUMS " FROM usage_ledger " \
    STORE_USAGE_RANGE " GROUP BY k ORDER BY k LIMIT ?4"
#define STORE_SQL_ACCOUNT(X) \
    X(LIMITS_GET, \
      "SELECT max_queued_tokens, max_daily_micros, max_monthly_micros, updated_at " \
      "FROM tenant_limits WHERE tenant_id = ?1") \
    X(LIMITS_PUT, \
      "INSERT INTO tenant_limits(tenant_id, max_queued_tokens, max_daily_micros, " \
      "max_monthly_micros, updated_at) VALUES (?1, ?2, ?3, ?4, ?5) " \
      "ON CONFLICT (tenant_id) DO UPDATE SET max_queued_tokens = excluded.max_queued_tokens, " \
      "max_daily_micros = excluded.max_daily_micros, " \
      "max_monthly_micros = excluded.max_monthly_micros, updated_at = excluded.updated_at") \
    X(BUDGET_RESERVED, \
      "SELECT COALESCE(SUM(reserved_tokens), 0), COALESCE(SUM(reserved_micros), 0) FROM batches " \
      "WHERE tenant_id = ?1 AND (reserved_tokens > 0 OR reserved_micros > 0)") \
    X(BUDGET_SPENT, \
      "SELECT COALESCE(SUM(cost_micros), 0) FROM usage_ledger " \
      "WHERE tenant_id = ?1 AND created_at >= ?2") \
    X(BATCH_RESERVE, \
      "UPDATE batches SET budgeted = 1, reserved_tokens = ?2, reserved_micros = ?3, " \
      "reserve_price_in = ?4, reserve_price_out = ?5 WHERE id = ?1") \
    X(USAGE_TOTALS, \
      "SELECT t.name, u.model, u.prompt_tokens, u.cached_tokens, u.completion_tokens, " \
      "u.cost_micros, u.requests FROM usage_totals u JOIN tenants t ON t.id = u.tenant_id " \
      "ORDER BY t.name, u.model") \
    X(USAGE_BY_BATCH, STORE_USAGE_GROUPED("batch_id")) \
    X(USAGE_BY_MODEL, STORE_USAGE_GROUPED("model")) \
    X(USAGE_BY_DAY, STORE_USAGE_GROUPED("strftime('%Y-%m-%d', created_at, 'unixepoch')")) \
    X(USAGE_BY_TENANT, STORE_USAGE_GROUPED("tenant_id")) \
    X(USAGE_TOTAL, "SELECT 0, 0, " STORE_USAGE_SUMS " FROM usage_ledger " STORE_USAGE_RANGE)

/* Fleet cost (store_fleet.c). A lease's end, its lapse, the range and the
 * batch's leases with their workers' overlapping ones; N is the parameter
 * holding now. Range statements: ?1 since, ?2 until, ?3 now, ?4 ttl
 * (FLEET_GAPS: ?1, ?2 only); batch statements: ?1 batch id, ?2 now. join: SQLite's CROSS JOIN keeps
 * leases the outer loop (the range's index), PostgreSQL plans its own. */
#define STORE_FLEET_END(lo, n) lo "(coalesce(l.released_at, " n "), l.expires_at)"
#define STORE_FLEET_LEASE_COLS(lo, n) \
    "l.id, l.worker_id, l.model, l.created_at, " STORE_FLEET_END(lo, n) ", CASE WHEN " \
    "(l.released_at IS NULL AND l.expires_at <= " n ") OR l.released_at >= l.expires_at " \
    "THEN 1 ELSE 0 END, coalesce(w.hourly_cost_micros, 0), CASE WHEN l.released_at IS NULL THEN 1 " \
    "ELSE 0 END"
#define STORE_FLEET_IN_RANGE(lo, n) \
    "coalesce(l.released_at, l.expires_at) >= ?1 AND l.created_at < ?2 AND (" STORE_FLEET_END(lo, n) \
    " > ?1 OR l.created_at >= ?1)"
#define STORE_FLEET_OF_BATCH(lo, n) \
    "l.id IN (SELECT DISTINCT l.id FROM lease_batches lb JOIN leases m ON m.id = lb.lease_id " \
    "JOIN leases l ON l.worker_id = m.worker_id AND l.created_at <= " lo "(coalesce(m.released_at, " \
    n "), m.expires_at) AND l.created_at >= m.created_at - " STORE_FLEET_LONGEST("m.worker_id") " AND " \
    STORE_FLEET_END(lo, n) " >= m.created_at WHERE lb.batch_id = ?1)"
/* The longest lease of worker w (an upper bound: released or expiry minus
 * start), through leases_worker_len (schema.sql migration 15): a lease
 * overlapping m started at most that long before m did, which bounds the
 * range scan of leases_worker to m's neighbours instead of every earlier
 * lease of the worker. */
#define STORE_FLEET_LONGEST(w) \
    "(SELECT max(coalesce(x.released_at, x.expires_at) - x.created_at) FROM leases x WHERE x.worker_id = " w ")"
#define STORE_FLEET_LEASES(lo, n, where) \
    "SELECT " STORE_FLEET_LEASE_COLS(lo, n) " FROM leases l LEFT JOIN workers w ON w.id = " \
    "l.worker_id WHERE " where
/* A part's tenant and token sums are its lease_batches row's (schema.sql
 * migration 13): written as results commit, untouched by deletions. */
#define STORE_FLEET_UNITS(join, where) \
    "SELECT lb.lease_id, lb.batch_id, lb.tenant_id, lb.n_requests, lb.prompt_tokens, " \
    "lb.cached_tokens, lb.completion_tokens, lb.reused_tokens FROM leases l " join " lease_batches lb ON " \
    "lb.lease_id = l.id WHERE " where
#define STORE_FLEET_WORKERS(lo, n, ttl) \
    "SELECT w.id, w.name, w.device, coalesce((SELECT min(m.canonical) FROM worker_models m " \
    "WHERE m.worker_id = w.id), ''), w.hourly_cost_micros, w.registered_at, w.last_seen, " \
    "coalesce((SELECT max(" STORE_FLEET_END(lo, n) ") FROM leases l WHERE l.worker_id = " \
    "w.id), 0), w.unpriced FROM workers w WHERE w.registered_at < ?2 AND (w.last_seen >= ?1 - " ttl \
    " OR EXISTS (SELECT 1 FROM leases l WHERE l.worker_id = w.id AND " STORE_FLEET_END(lo, n) \
    " >= ?1)) ORDER BY w.id"
#define STORE_SQL_FLEET(X, lo, n3, ttl, join, units) \
    X(FLEET_WORKERS, STORE_FLEET_WORKERS(lo, n3, ttl)) \
    X(FLEET_LEASES_RANGE, STORE_FLEET_LEASES(lo, n3, STORE_FLEET_IN_RANGE(lo, n3))) \
    X(FLEET_UNITS_RANGE, units(join, STORE_FLEET_IN_RANGE(lo, n3))) \
    X(FLEET_GAPS, "SELECT worker_id, gone_at, back_at FROM worker_gaps WHERE back_at > ?1 AND gone_at < ?2")
#define STORE_SQL_FLEET_BATCH(X, lo, n2, join, units) \
    X(FLEET_LEASES_BATCH, STORE_FLEET_LEASES(lo, n2, STORE_FLEET_OF_BATCH(lo, n2))) \
    X(FLEET_UNITS_BATCH, units(join, STORE_FLEET_OF_BATCH(lo, n2)))
/* PostgreSQL: a batch's leases and their workers' overlapping ones by
 * islands (GET /v1/batches/{id} on a batch of 391 leases read 11,000
 * buffers, 5.8 ms of server CPU: STORE_FLEET_OF_BATCH probed the worker's
 * longest lease and the range around each of the batch's leases, twice).
 * Per worker, the windows [start - the worker's longest lease, end] of the
 * batch's leases m are merged where they touch (a running max of the ends,
 * in start order), and each merged window is one range scan of
 * leases_worker: a lease overlapping some m started inside m's window.
 * Besides those it may return leases of the worker that start inside a
 * window and overlap none of m (ended before the first m of the window);
 * they share no piece of worker time with the batch's leases, so the
 * batch's figures are the same (fleet.h: a piece is split between the
 * leases held during it). */
#define STORE_PG_FLEET_ISLANDS \
    "WITH m AS (SELECT m.worker_id, m.created_at AS s, least(coalesce(m.released_at, ?2::bigint), " \
    "m.expires_at) AS e FROM lease_batches lb JOIN leases m ON m.id = lb.lease_id WHERE lb.batch_id = ?1), " \
    "w AS MATERIALIZED (SELECT d.worker_id, (SELECT max(coalesce(x.released_at, x.expires_at) - x.created_at) FROM " \
    "leases x WHERE x.worker_id = d.worker_id) AS longest FROM (SELECT DISTINCT worker_id FROM m) d), " \
    "g AS (SELECT m.worker_id, m.s, m.e, w.longest, CASE WHEN m.s - w.longest > max(m.e) OVER (PARTITION " \
    "BY m.worker_id ORDER BY m.s, m.e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) THEN 1 ELSE 0 END " \
    "AS brk FROM m JOIN w ON w.worker_id = m.worker_id), " \
    "i AS (SELECT worker_id, min(s) AS s0, min(s) - max(longest) AS lo, max(e) AS hi FROM (SELECT g.*, " \
    "sum(brk) OVER (PARTITION BY worker_id ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS isl FROM g) y " \
    "GROUP BY worker_id, isl) "
#define STORE_PG_FLEET_ISLAND_LEASES \
    "FROM i LEFT JOIN workers w ON w.id = i.worker_id JOIN leases l ON l.worker_id = i.worker_id AND l.created_at >= i.lo AND l.created_at <= " \
    "i.hi AND least(coalesce(l.released_at, ?2::bigint), l.expires_at) >= i.s0 "
/* The units of those leases are read by their ids (?1, a text array of
 * the ids FLEET_LEASES_BATCH returned, in the same snapshot), not by the
 * islands again: the islands were half of a GET's server time (1.3 ms
 * each on a batch of 391 leases, pg_stat_statements, bench/NOTES.md). */
#define STORE_SQL_FLEET_BATCH_PG(X) \
    X(FLEET_LEASES_BATCH, STORE_PG_FLEET_ISLANDS "SELECT " STORE_FLEET_LEASE_COLS("least", "?2::bigint") \
      " " STORE_PG_FLEET_ISLAND_LEASES) \
    X(FLEET_UNITS_BATCH, "SELECT lb.lease_id, lb.batch_id, lb.tenant_id, lb.n_requests, lb.prompt_tokens, " \
      "lb.cached_tokens, lb.completion_tokens, lb.reused_tokens FROM lease_batches lb " \
      "WHERE lb.lease_id = ANY(?1::text[])")

/* Operator views (store_admin.c): the worker list and the /metrics gauges.
 * Queue depth reads the partial indexes requests_ready / requests_leased
 * (PostgreSQL: requests_queued and the open leases' lists, STORE_SQL_PG_QUEUE). */
#define STORE_SQL_ADMIN(X) \
    X(WORKERS_LIST, \
      "SELECT w.id, w.name, w.device, w.registered_at, w.last_seen, w.tokens_per_s, " \
      "(SELECT group_concat(c, ',') FROM (SELECT DISTINCT canonical AS c FROM worker_models " \
      "WHERE worker_id = w.id ORDER BY canonical)), " \
      "(SELECT count(*) FROM leases l WHERE l.worker_id = w.id AND l.released_at IS NULL), " \
      "(SELECT count(*) FROM leases l JOIN requests q ON q.lease_id = l.id WHERE " \
      "l.worker_id = w.id AND l.released_at IS NULL), w.hourly_cost_micros " \
      "FROM workers w WHERE w.last_seen >= ?1 ORDER BY w.registered_at DESC, w.id DESC LIMIT ?2") \
    X(DEPTH_QUEUED, "SELECT model, count(*) FROM requests WHERE status = 'queued' GROUP BY model") \
    X(DEPTH_LEASED, "SELECT model, count(*) FROM requests WHERE status = 'leased' GROUP BY model") \
    X(LEASES_OUTSTANDING, "SELECT count(*) FROM leases WHERE released_at IS NULL") \
    X(DEAD_LETTERS_COUNT, "SELECT count(*) FROM dead_letters")

/* Statements of store_webhook.c (kept in their own list; same enum). */
#define STORE_WH_EP_COLS \
    "id, tenant_id, kind, url, event_types, created_at, disabled_at, disabled_reason, failing_since"
#define STORE_SQL_WEBHOOK(X) \
    X(WH_EVENT_INSERT, \
      "INSERT INTO webhook_events(id, tenant_id, type, object_id, payload, created_at) " \
      "SELECT ?1, tenant_id, ?2, id, ?3, ?4 FROM batches WHERE id = ?5") \
    X(WH_EP_INSERT, \
      "INSERT INTO webhook_endpoints(id, tenant_id, url, secret, event_types, created_at, kind) " \
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)") \
    X(WH_EP_COUNT, "SELECT count(*) FROM webhook_endpoints WHERE tenant_id = ?1 AND kind = 'endpoint'") \
    X(WH_EP_GET, "SELECT " STORE_WH_EP_COLS " FROM webhook_endpoints WHERE id = ?1 AND tenant_id = ?2") \
    X(WH_EP_LIST, "SELECT " STORE_WH_EP_COLS " FROM webhook_endpoints WHERE tenant_id = ?1 " \
                  "ORDER BY id LIMIT 1000") \
    X(WH_EP_DELETE, "DELETE FROM webhook_endpoints WHERE id = ?1 AND tenant_id = ?2") \
    X(WH_EP_BY_URL, "SELECT id FROM webhook_endpoints WHERE tenant_id = ?1 AND kind = 'batch_url' " \
                    "AND url = ?2") \
    X(WH_SECRET_GET, "SELECT secret FROM webhook_tenant_secrets WHERE tenant_id = ?1") \
    X(WH_SECRET_INSERT, "INSERT OR IGNORE INTO webhook_tenant_secrets(tenant_id, secret, created_at) " \
                        "VALUES (?1, ?2, ?3)") \
    X(WH_EVENTS_PENDING, \
      "SELECT e.id, e.tenant_id, e.type, e.object_id, json_extract(b.metadata, '$.webhook_url') " \
      "FROM webhook_events e LEFT JOIN batches b ON b.id = e.object_id WHERE e.fanned_out = 0 " \
      "ORDER BY e.id LIMIT ?1") \
    X(WH_FANOUT_ENDPOINTS, \
      "INSERT OR IGNORE INTO webhook_deliveries(event_id, endpoint_id, next_attempt_at, created_at) " \
      "SELECT ?1, id, ?2, ?2 FROM webhook_endpoints WHERE tenant_id = ?3 AND kind = 'endpoint' " \
      "AND disabled_at IS NULL AND (event_types = '*' OR " \
      "instr(',' || event_types || ',', ',' || ?4 || ',') > 0)") \
    X(WH_DELIVERY_INSERT, \
      "INSERT OR IGNORE INTO webhook_deliveries(event_id, endpoint_id, next_attempt_at, created_at) " \
      "VALUES (?1, ?2, ?3, ?3) RETURNING id") \
    X(WH_EVENT_DONE, "UPDATE webhook_events SET fanned_out = 1 WHERE id = ?1") \
    X(WH_DUE, "SELECT 1 FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= ?1 LIMIT 1") \
    X(WH_CLAIM, \
      "UPDATE webhook_deliveries SET attempts = attempts + 1, next_attempt_at = ?2, " \
      "last_attempt_at = ?1 WHERE id = (SELECT d.id FROM webhook_deliveries d JOIN " \
      "webhook_endpoints p ON p.id = d.endpoint_id WHERE d.status = 'pending' AND " \
      "d.next_attempt_at <= ?1 AND p.disabled_at IS NULL ORDER BY d.next_attempt_at, d.id " \
      "LIMIT 1) RETURNING id, attempts, event_id, endpoint_id") \
    X(WH_JOB, \
      "SELECT e.payload, p.url, CASE p.kind WHEN 'batch_url' THEN coalesce(s.secret, '') " \
      "ELSE p.secret END FROM webhook_events e, webhook_endpoints p LEFT JOIN " \
      "webhook_tenant_secrets s ON s.tenant_id = p.tenant_id WHERE e.id = ?1 AND p.id = ?2") \
    X(WH_ATTEMPT_INSERT, \
      "INSERT INTO webhook_attempts(delivery_id, attempt, started_at, status_code, latency_ms, " \
      "outcome, error) SELECT id, ?2, ?3, ?4, ?5, ?6, ?7 FROM webhook_deliveries WHERE id = ?1") \
    X(WH_DELIVERY_FENCE, \
      "SELECT d.endpoint_id, p.failing_since FROM webhook_deliveries d JOIN webhook_endpoints p " \
      "ON p.id = d.endpoint_id WHERE d.id = ?1 AND d.attempts = ?2 AND d.status = 'pending'") \
    X(WH_DELIVERY_SET, \
      "UPDATE webhook_deliveries SET status = ?2, next_attempt_at = ?3, last_status = ?4, " \
      "last_error = ?5, last_latency_ms = ?6, delivered_at = ?7 WHERE id = ?1") \
    X(WH_EP_OK, "UPDATE webhook_endpoints SET failing_since = NULL WHERE id = ?1") \
    X(WH_EP_FAILING, "UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, ?2) " \
                     "WHERE id = ?1") \
    X(WH_EP_DISABLE, \
      "UPDATE webhook_endpoints SET disabled_at = ?2, disabled_reason = ?3 WHERE id = ?1 " \
      "AND disabled_at IS NULL") \
    X(WH_EP_FAIL_PENDING, \
      "UPDATE webhook_deliveries SET status = 'failed', last_error = 'endpoint disabled; last " \
      "error: ' || coalesce(last_error, 'none') WHERE endpoint_id = ?1 AND status = 'pending'") \
    X(WH_DELIVERY_LIST, \
      "SELECT d.id, d.event_id, e.type, d.endpoint_id, d.status, d.attempts, d.next_attempt_at, " \
      "d.last_status, d.last_error, d.last_latency_ms, d.created_at, d.last_attempt_at, " \
      "d.delivered_at, e.object_id FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id " \
      "WHERE d.endpoint_id = ?1 AND (?2 = 0 OR d.id < ?2) ORDER BY d.id DESC LIMIT ?3") \
    X(WH_ATTEMPT_LIST, \
      "SELECT attempt, started_at, status_code, latency_ms, outcome, error FROM (SELECT * FROM " \
      "webhook_attempts WHERE delivery_id = ?1 ORDER BY id DESC LIMIT 50) ORDER BY id") \
    X(WH_REDELIVER, \
      "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?3, " \
      "delivered_at = NULL WHERE id = ?1 AND endpoint_id = ?2") \
    X(WH_TEST_EVENT, \
      "INSERT INTO webhook_events(id, tenant_id, type, object_id, payload, created_at, " \
      "fanned_out) VALUES (?1, ?2, 'webhook.test', ?3, ?4, ?5, 1)") \
    X(WH_STATS, \
      "SELECT (SELECT count(*) FROM webhook_events WHERE fanned_out = 0), " \
      "(SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'), " \
      "(SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'), " \
      "(SELECT count(*) FROM webhook_deliveries WHERE status = 'failed'), " \
      "(SELECT count(*) FROM webhook_endpoints WHERE disabled_at IS NOT NULL)")

/* The PostgreSQL text of the statements whose SQLite text PostgreSQL does
 * not take (store_stmt picks it on a PostgreSQL store; every other entry
 * runs as written, its ?N rewritten to $N by the driver). Why each differs:
 *   BEGIN             SQLite's BEGIN IMMEDIATE is one writer at a time; here
 *                     a write transaction takes pg_advisory_xact_lock on
 *                     STORE_PG_WRITE_LOCK with its BEGIN (STORE_PG_BEGIN_*),
 *                     exclusive, or shared on the row-locked hot paths
 *                     (STORE_SQL_PG_HOT; store.h says which and why)
 *   BEGIN_READ        one snapshot for the whole read: REPEATABLE READ
 *   USER_VERSION      no PRAGMA: the schema_version table (store_migrate)
 *   "?N::text IS NULL" a NULL parameter whose first use does not type it
 *   INSERT OR IGNORE / OR REPLACE -> ON CONFLICT; max(a, b) -> greatest;
 *   (a = b) as 0/1 -> CASE; group_concat -> string_agg; instr -> strpos;
 *   strftime -> to_char; json_extract -> ->>; json_object -> concatenation
 *   (the body is kept as sent: PostgreSQL has no json minifier);
 *   subqueries in FROM need an alias before PostgreSQL 16; a selected
 *   column is in the GROUP BY (BATCH_MODELS_FILL's batch_id). */
#define STORE_PG_WRITE_LOCK "7240619001" /* advisory lock key of the writer lock */
#define STORE_PG_CHANNEL "jobd_work" /* LISTEN/NOTIFY channel: leasable work appeared */
/* store_w_begin / store_w_begin_shared at depth 0 on PostgreSQL: BEGIN and
 * the writer lock, one round trip (sdb_exec: the simple protocol takes a
 * script). Exclusive for every writer but the row-locked hot paths, which
 * take it shared (see store.h). */
#define STORE_PG_BEGIN_EXCL \
    "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock(" STORE_PG_WRITE_LOCK ")"
#define STORE_PG_NOTIFY_COMMIT "SELECT pg_notify('" STORE_PG_CHANNEL "', ''); COMMIT"
#define STORE_PG_BEGIN_SHARED \
    "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock_shared(" STORE_PG_WRITE_LOCK ")"
#define STORE_PG_USAGE_RANGE \
    "WHERE (?1::text IS NULL OR tenant_id = ?1) AND created_at >= ?2 AND created_at < ?3 " \
    "AND (?5::text IS NULL OR batch_id = ?5)"
#define STORE_PG_USAGE_GROUPED(key) \
    "SELECT " key " AS k, MIN(created_at), " STORE_USAGE_SUMS " FROM usage_ledger " \
    STORE_PG_USAGE_RANGE " GROUP BY k ORDER BY k LIMIT ?4"
#define STORE_SQL_PG(X) \
    X(BEGIN, "BEGIN ISOLATION LEVEL READ COMMITTED") \
    STORE_SQL_PG_QUEUE(X) \
    X(BEGIN_READ, "BEGIN ISOLATION LEVEL REPEATABLE READ") \
    X(USER_VERSION, "SELECT version FROM schema_version") \
    X(OWN_TRY, "SELECT pg_try_advisory_lock(?1::int4, hashtext(?2::text))") \
    X(OWN_RELEASE, "SELECT pg_advisory_unlock(?1::int4, hashtext(?2::text))") \
    X(KEY_LIST, "SELECT k.id, k.tenant_id, t.name, k.created_at, k.revoked_at FROM api_keys k " \
                "JOIN tenants t ON t.id = k.tenant_id WHERE ?1::text IS NULL OR k.tenant_id = ?1 " \
                "ORDER BY k.created_at, k.id") \
    X(FILE_LIST_DESC, "SELECT " STORE_FILE_COLS " FROM files WHERE tenant_id = ?1 " \
                      "AND (?2::text IS NULL OR purpose = ?2) AND (?3::text IS NULL OR id < ?3) " \
                      "ORDER BY id DESC LIMIT ?4") \
    X(FILE_LIST_ASC, "SELECT " STORE_FILE_COLS " FROM files WHERE tenant_id = ?1 " \
                     "AND (?2::text IS NULL OR purpose = ?2) AND (?3::text IS NULL OR id > ?3) " \
                     "ORDER BY id ASC LIMIT ?4") \
    X(BATCH_GET, "SELECT " STORE_BATCH_COLS " FROM batches WHERE id = ?1 " \
                 "AND (?2::text IS NULL OR tenant_id = ?2)") \
    X(BATCH_LIST, "SELECT " STORE_BATCH_COLS " FROM batches WHERE tenant_id = ?1 " \
                  "AND (?2::text IS NULL OR id < ?2) AND (?4::text IS NULL OR status = ?4) " \
                  "ORDER BY id DESC LIMIT ?3") \
    X(BATCH_LIST_API, "SELECT " STORE_BATCH_COLS " FROM batches WHERE tenant_id = ?1 " \
                      "AND api = ?4 AND (?2::text IS NULL OR id < ?2) ORDER BY id DESC LIMIT ?3") \
    X(IDEM_PUT, "INSERT INTO idempotency_keys(tenant_id, key, fingerprint, created_at) " \
                "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (tenant_id, key) DO UPDATE SET " \
                "fingerprint = excluded.fingerprint, created_at = excluded.created_at, " \
                "status_code = NULL, response = NULL, completed_at = NULL") \
    X(WORKER_MODEL_INSERT, \
      "INSERT INTO worker_models(worker_id, canonical, name, model_sha256) VALUES (?1, ?2, ?3, ?4) " \
      "ON CONFLICT DO NOTHING") \
    X(WORKER_ENDPOINT_INSERT, \
      "INSERT INTO worker_endpoints(worker_id, canonical, endpoint) VALUES (?1, ?2, ?3) " \
      "ON CONFLICT DO NOTHING") \
    /* with the gap (WORKER_GAP_NOTE) in the same round trip: ?4 the worker TTL (0: none) */ \
    X(WORKER_SEEN, \
      "WITH gap AS (INSERT INTO worker_gaps(worker_id, gone_at, back_at) SELECT id, last_seen, ?2 " \
      "FROM workers WHERE id = ?1 AND ?4 > 0 AND last_seen < ?2 - ?4 ON CONFLICT DO NOTHING) " \
      "UPDATE workers SET last_seen = greatest(last_seen, ?2), tokens_per_s = CASE WHEN ?3 " \
      ">= 0 THEN ?3 ELSE tokens_per_s END WHERE id = ?1") \
    X(BACKLOG_BATCHES, \
      "SELECT b.id, b.priority, b.expires_at, b.n_total - b.n_completed - b.n_failed, " \
      "jobd_recent_completion_avg(b.id), jobd_max_tokens_avg(b.id) " \
      "FROM batches b WHERE b.tenant_id = ?1 AND b.model = ?2 AND b.status = 'in_progress'") \
    X(LEASE_EXTEND, \
      "UPDATE leases SET expires_at = greatest(expires_at, ?2) WHERE id = ?1 AND " \
      "released_at IS NULL RETURNING expires_at") \
    X(DL_INSERT, \
      "INSERT INTO dead_letters(request_id, batch_id, tenant_id, custom_id, attempts, " \
      "reason, last_error, line, created_at) SELECT q.id, q.batch_id, q.tenant_id, " \
      "q.custom_id, q.attempts, ?2, ?3::text, '{\"custom_id\":' || to_json(q.custom_id)::text || " \
      "',\"method\":\"POST\",\"url\":' || to_json(b.endpoint)::text || ',\"body\":' || " \
      "q.body || '}', ?4 FROM requests q JOIN batches b ON b.id = q.batch_id WHERE q.id = ?1") \
    X(DL_COLS_LIST_BATCH, \
      "SELECT request_id, batch_id, tenant_id, custom_id, attempts, reason, " \
      "last_error, line, created_at FROM dead_letters WHERE batch_id = ?1 AND (?2::text IS " \
      "NULL OR tenant_id = ?2) AND (?3::text IS NULL OR request_id > ?3) ORDER BY " \
      "request_id LIMIT ?4") \
    X(DL_COLS_LIST_ALL, \
      "SELECT request_id, batch_id, tenant_id, custom_id, attempts, reason, " \
      "last_error, line, created_at FROM dead_letters WHERE (?2::text IS NULL OR tenant_id " \
      "= ?2) AND (?3::text IS NULL OR request_id > ?3) AND ?1::text IS NULL ORDER BY request_id " \
      "LIMIT ?4") \
    X(DL_GET, \
      "SELECT d.batch_id, b.status, b.expires_at FROM dead_letters d JOIN batches b " \
      "ON b.id = d.batch_id WHERE d.request_id = ?1 AND (?2::text IS NULL OR d.tenant_id = " \
      "?2)") \
    X(USAGE_BY_BATCH, STORE_PG_USAGE_GROUPED("batch_id")) \
    X(USAGE_BY_MODEL, STORE_PG_USAGE_GROUPED("model")) \
    X(USAGE_BY_DAY, STORE_PG_USAGE_GROUPED("to_char(to_timestamp(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')")) \
    X(USAGE_BY_TENANT, STORE_PG_USAGE_GROUPED("tenant_id")) \
    X(USAGE_TOTAL, "SELECT 0, 0, " STORE_USAGE_SUMS " FROM usage_ledger " STORE_PG_USAGE_RANGE) \
    X(WORKERS_LIST, \
      "SELECT w.id, w.name, w.device, w.registered_at, w.last_seen, w.tokens_per_s, " \
      "(SELECT string_agg(c, ',' ORDER BY c) FROM (SELECT DISTINCT canonical AS c FROM " \
      "worker_models WHERE worker_id = w.id) wm), " \
      "(SELECT count(*) FROM leases l WHERE l.worker_id = w.id AND l.released_at IS NULL), " \
      "(SELECT coalesce(sum(l.n_held), 0) FROM leases l WHERE l.worker_id = w.id AND " \
      "l.released_at IS NULL), w.hourly_cost_micros " \
      "FROM workers w WHERE w.last_seen >= ?1 ORDER BY w.registered_at DESC, w.id DESC LIMIT ?2") \
    X(BATCH_MODELS_FILL, "INSERT INTO batch_models(batch_id, model, n_requests) SELECT batch_id, " \
                         "model, count(*) FROM requests WHERE batch_id = ?1 GROUP BY batch_id, model " \
                         "ON CONFLICT (batch_id, model) DO NOTHING") \
    X(WH_SECRET_INSERT, "INSERT INTO webhook_tenant_secrets(tenant_id, secret, created_at) " \
                        "VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING") \
    X(WH_EVENTS_PENDING, \
      "SELECT e.id, e.tenant_id, e.type, e.object_id, b.metadata::json ->> 'webhook_url' " \
      "FROM webhook_events e LEFT JOIN batches b ON b.id = e.object_id WHERE e.fanned_out = 0 " \
      "ORDER BY e.id LIMIT ?1") \
    X(WH_FANOUT_ENDPOINTS, \
      "INSERT INTO webhook_deliveries(event_id, endpoint_id, next_attempt_at, created_at) " \
      "SELECT ?1, id, ?2, ?2 FROM webhook_endpoints WHERE tenant_id = ?3 AND kind = 'endpoint' " \
      "AND disabled_at IS NULL AND (event_types = '*' OR " \
      "strpos(',' || event_types || ',', ',' || ?4 || ',') > 0) ON CONFLICT DO NOTHING") \
    X(WH_DELIVERY_INSERT, \
      "INSERT INTO webhook_deliveries(event_id, endpoint_id, next_attempt_at, created_at) " \
      "VALUES (?1, ?2, ?3, ?3) ON CONFLICT DO NOTHING RETURNING id") \
    X(WH_ATTEMPT_LIST, \
      "SELECT attempt, started_at, status_code, latency_ms, outcome, error FROM (SELECT * FROM " \
      "webhook_attempts WHERE delivery_id = ?1 ORDER BY id DESC LIMIT 50) a ORDER BY id") \
    X(WH_CLAIM, \
      "UPDATE webhook_deliveries SET attempts = attempts + 1, next_attempt_at = ?2, " \
      "last_attempt_at = ?1 WHERE id = (SELECT d.id FROM webhook_deliveries d JOIN " \
      "webhook_endpoints p ON p.id = d.endpoint_id WHERE d.status = 'pending' AND " \
      "d.next_attempt_at <= ?1 AND p.disabled_at IS NULL ORDER BY d.next_attempt_at, d.id " \
      "LIMIT 1 FOR NO KEY UPDATE OF d SKIP LOCKED) RETURNING id, attempts, event_id, endpoint_id") \
    STORE_SQL_FLEET(X, "least", "?3::bigint", "?4::bigint", "JOIN", STORE_FLEET_UNITS) \
    STORE_SQL_FLEET_BATCH_PG(X) \
    STORE_SQL_PG_HOT(X)

/* PostgreSQL: a budgeted batch's reservation (batches.reserved_tokens /
 * reserved_micros, schema_pg.sql migration 15) follows its requests in the
 * statements that change their status, as SQLite's requests_reserve
 * trigger does per row: a request leaving queued/leased for succeeded/failed
 * releases its share, one coming back reserves it again, while the batch
 * is not terminal. STORE_PG_RESERVE(u, sign, when) is the CTE that adds
 * sign (an SQL expression: -1 releases, 1 reserves again) times the shares
 * of the rows of the CTE u (columns batch_id, prompt_tokens_est,
 * max_tokens), where the SQL condition when holds, clamped at 0: their
 * batches are read once, by their ids, and only the budgeted ones join the
 * rows (a commit of unbudgeted batches costs one probe of each of its
 * batches). */
#define STORE_PG_RESERVE(u, sign, when) \
    "rv AS (UPDATE batches b SET reserved_tokens = greatest(0, b.reserved_tokens + (" sign ") * d.t), " \
    "reserved_micros = greatest(0, b.reserved_micros + (" sign ") * d.m) FROM (SELECT x.batch_id, " \
    "sum(x.prompt_tokens_est + x.max_tokens) AS t, sum(jobd_reserve_share(x.prompt_tokens_est, " \
    "x.max_tokens, y.reserve_price_in, y.reserve_price_out)) AS m FROM " u " x JOIN " \
    "(SELECT id, reserve_price_in, reserve_price_out FROM batches WHERE id = ANY(ARRAY(" \
    "SELECT DISTINCT batch_id FROM " u ")) AND budgeted = 1 AND status NOT IN ('completed', " \
    "'failed', 'expired', 'cancelled')) y ON y.id = x.batch_id GROUP BY x.batch_id) d " \
    "WHERE b.id = d.batch_id AND (" when "))"
/* The row-locked hot paths on PostgreSQL: leasing takes the
 * requests_queued rows of the requests it reads with FOR UPDATE SKIP
 * LOCKED (an acquire on another connection skips them instead of waiting),
 * every operation on a lease locks its leases row first (commit, heartbeat,
 * release and sweep of one lease run one at a time; of different leases at
 * once), and a claim / a commit's request endings are one statement each
 * over arrays (?N::text[] bound as array literals, store_arr_*), fenced by
 * status and lease id, keeping requests_queued, leases.n_held and
 * lease_batches.request_ids (STORE_SQL_PG_QUEUE below). The claim's
 * fence is written coalesce(status, '') = 'queued' (status is NOT NULL:
 * the same test) so that it implies no partial index's predicate: when
 * requests_ready existed (before schema_pg.sql migration 13), the
 * statistics of a fresh burst made the planner read every queued request of
 * the batch through it and filter them by id (15,000 rows for 256) instead
 * of probing the 256 ids in the primary key. The commit's
 * request endings are written the same way, one UPDATE per outcome (the
 * successes, then the 4xx failures, each with its constant status and
 * error) instead of a join with an unnest of (id, status, error): with
 * statistics that say few requests are leased, the planner drove that join
 * from the requests it thought leased (requests_leased or requests_lease,
 * estimated 1-2 rows, read 256-1,024) and compared every one with every
 * unnest row (65,280 rows removed by the join filter: 30-40 ms a commit,
 * twice the server CPU per request); an id list has no join to misplan. */
#define STORE_SQL_PG_HOT(X) \
    /* the queued rows of batch ?1 due by ?2 whose model worker ?4 serves as ?5, in \
     * (next_attempt_at, line) order, FOR UPDATE OF requests_queued SKIP LOCKED \
     * (schema_pg.sql migration 13: a function, for its plan) */ \
    X(LEASE_READY, "SELECT * FROM jobd_lease_ready(?1, ?2, ?3, ?4, ?5)") \
    X(LEASE_GET, "SELECT worker_id, expires_at, released_at FROM leases WHERE id = ?1 FOR UPDATE") \
    X(LEASE_CLAIM_MANY, \
      "WITH c AS (UPDATE requests SET status = 'leased', updated_at = ?3, attempts = attempts + 1, " \
      "lease_id = ?2::text, finished_at = NULL, reuse_key = NULL WHERE id = ANY(?1::text[]) " \
      "AND coalesce(status, '') = 'queued' RETURNING id, batch_id, tenant_id, line, next_attempt_at), " \
      "d AS (DELETE FROM requests_queued WHERE ctid = ANY(ARRAY(SELECT (" STORE_PG_QUEUED_ROW("c") \
      ") FROM c)) RETURNING 1), " \
      "p AS (INSERT INTO lease_batches(lease_id, batch_id, tenant_id, n_requests, request_ids) " \
      "SELECT ?2::text, batch_id, min(tenant_id), count(*), array_agg(id) FROM c GROUP BY batch_id " \
      "ON CONFLICT (lease_id, batch_id) DO UPDATE SET n_requests = lease_batches.n_requests + " \
      "excluded.n_requests, request_ids = coalesce(lease_batches.request_ids, '{}') || " \
      "excluded.request_ids) " \
      "SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM d)") \
    X(REQ_FOR_COMMIT_MANY, \
      "SELECT q.id, q.status, q.lease_id, q.batch_id, q.tenant_id, q.model, " \
      "q.reuse_key IS NOT NULL FROM requests q WHERE q.id = ANY(?1::text[])") \
    X(REQ_FINISH_MANY, \
      "WITH u AS (UPDATE requests SET status = ?2, updated_at = ?3, lease_id = NULL, " \
      "last_error = coalesce(?4::text, last_error), finished_at = ?3 " \
      "WHERE id = ANY(?1::text[]) AND coalesce(status, '') = 'leased' " \
      "AND coalesce(lease_id, '') = ?5::text RETURNING batch_id, prompt_tokens_est, max_tokens), " \
      "l AS (UPDATE leases SET n_held = n_held - (SELECT count(*) FROM u) WHERE id = ?5::text), " \
      STORE_PG_RESERVE("u", "-1", "TRUE") \
      " SELECT count(*) FROM u") \
    X(RESULT_INSERT_MANY, \
      "INSERT INTO results(request_id, batch_id, lease_id, status_code, body, prompt_tokens, " \
      "completion_tokens, cached_tokens, queue_ms, prefill_ms, decode_ms, gpu_ms, created_at) " \
      "SELECT u.r, u.b, ?3::text, u.sc, decode(u.body, 'hex'), u.pt, u.ct, u.cc, u.qm, u.pm, " \
      "u.dm, u.gm, ?4 FROM unnest(?1::text[], ?2::text[], ?5::bigint[], ?6::text[], " \
      "?7::bigint[], ?8::bigint[], ?9::bigint[], ?10::bigint[], ?11::bigint[], ?12::bigint[], " \
      "?13::bigint[]) AS u(r, b, sc, body, pt, ct, cc, qm, pm, dm, gm) ORDER BY u.b") \
    X(USAGE_INSERT_MANY, \
      "INSERT INTO usage_ledger(tenant_id, batch_id, request_id, model, prompt_tokens, " \
      "completion_tokens, cached_tokens, cost_micros, created_at) SELECT u.t, u.b, u.r, u.m, " \
      "u.pt, u.ct, u.cc, u.cost, ?1 FROM unnest(?2::text[], ?3::text[], ?4::text[], ?5::text[], " \
      "?6::bigint[], ?7::bigint[], ?8::bigint[], ?9::bigint[]) AS u(t, b, r, m, pt, ct, cc, cost) " \
      "ORDER BY u.t, u.m") \
    X(BATCH_LOCK_MANY, \
      "SELECT b.id FROM batches b WHERE b.id IN (SELECT q.batch_id FROM requests q WHERE " \
      "?2::text[] IS NOT NULL AND q.id = ANY(?2::text[]) AND q.lease_id = ?1::text AND " \
      "q.status = 'leased' UNION ALL SELECT lb.batch_id FROM lease_batches lb WHERE " \
      "?2::text[] IS NULL AND lb.lease_id = ?1::text AND lb.request_ids IS NOT NULL) " \
      "AND (?3::int = 1 OR b.status <> 'in_progress') ORDER BY b.id FOR NO KEY UPDATE OF b") \
    X(BATCH_LOCK_SEQ, "SELECT 1 FROM batches WHERE id = ?1 FOR NO KEY UPDATE") \
    X(BATCH_LOCK_IDS, "SELECT id FROM batches WHERE id = ANY(?1::text[]) ORDER BY id FOR NO KEY UPDATE") \
    X(REQ_INSERT_MANY, \
      "WITH n AS (INSERT INTO requests(id, batch_id, tenant_id, line, custom_id, model, body, " \
      "prompt_tokens_est, max_tokens, created_at, updated_at) SELECT u.id, ?2, ?3, u.line, " \
      "u.cid, u.model, u.body, u.pte, u.mt, ?10, ?10 FROM unnest(?1::text[], ?4::bigint[], " \
      "?5::text[], ?6::text[], ?7::text[], ?8::bigint[], ?9::bigint[]) WITH ORDINALITY " \
      "AS u(id, line, cid, model, body, pte, mt, ord) ORDER BY u.ord " \
      "ON CONFLICT (batch_id, custom_id) DO NOTHING RETURNING id, batch_id, line, next_attempt_at), " \
      "q AS (INSERT INTO requests_queued(batch_id, next_attempt_at, line, request_id) " \
      "SELECT batch_id, next_attempt_at, line, id FROM n) SELECT line FROM n") \
    X(NOTIFY_WORK, "SELECT pg_notify('" STORE_PG_CHANNEL "', '')")

/* PostgreSQL: the ready queue and the lease membership (schema_pg.sql
 * migration 13), which let a claim and a commit update a request's row in
 * place (HOT: no index reads status, lease_id or next_attempt_at).
 * Every statement that changes a request's status keeps requests_queued,
 * leases.n_held and lease_batches.request_ids in the same statement:
 * LEASE_CLAIM_MANY and REQ_FINISH_MANY above, REQ_INSERT_MANY (ingest)
 * and REQ_TRANSITION here (every other change, one request at a time: it
 * reads the old lease id from the row before its update, o). A lease's
 * requests are those of its lease_batches.request_ids still leased under
 * it (a request given back and claimed again by another lease stays in
 * the first one's list); a batch's, those of its parts whose lease has not
 * ended (request_ids not NULL). STORE_PG_QUEUED_ROW(c) is the ctid of the
 * requests_queued row of the request c (columns id, batch_id, line,
 * next_attempt_at): a scalar subquery per row, so one probe of
 * requests_queued_ready each whatever the planner thinks of the join, and
 * a delete by ctid = ANY (a TID scan). */
#define STORE_PG_QUEUED_ROW(c) \
    "SELECT x.ctid FROM requests_queued x WHERE x.batch_id = " c ".batch_id AND " \
    "x.next_attempt_at = " c ".next_attempt_at AND x.line = " c ".line AND x.request_id = " c ".id"
#define STORE_PG_LEASE_ENDED \
    "UPDATE lease_batches SET request_ids = NULL WHERE lease_id = (SELECT id FROM e) AND " \
    "request_ids IS NOT NULL"
#define STORE_SQL_PG_QUEUE(X) \
    X(REQ_TRANSITION, \
      "WITH o AS (SELECT lease_id FROM requests WHERE id = ?1), " \
      "u AS (UPDATE requests SET status = ?2, updated_at = ?5, " \
      "attempts = CASE WHEN ?3 = 'failed' THEN 0 ELSE attempts + " \
      "CASE WHEN ?2 = 'leased' THEN 1 ELSE 0 END - ?9 END, " \
      "lease_id = CASE WHEN ?2 = 'leased' THEN ?6::text ELSE NULL END, " \
      "reuse_key = CASE WHEN ?2 = 'leased' THEN NULL ELSE reuse_key END, " \
      "next_attempt_at = CASE WHEN ?2 = 'queued' THEN ?7 ELSE next_attempt_at END, " \
      "last_error = coalesce(?8::text, last_error), " \
      "finished_at = CASE WHEN ?2 IN ('succeeded', 'failed') THEN ?5 ELSE NULL END " \
      "WHERE id = ?1 AND status = ?3 AND (?4::text IS NULL OR lease_id = ?4) " \
      "RETURNING id, batch_id, tenant_id, line, next_attempt_at, prompt_tokens_est, max_tokens), " \
      "dq AS (DELETE FROM requests_queued WHERE ?3 = 'queued' AND ctid = (SELECT (" \
      STORE_PG_QUEUED_ROW("u") ") FROM u)), " \
      "iq AS (INSERT INTO requests_queued(batch_id, next_attempt_at, line, request_id) " \
      "SELECT batch_id, next_attempt_at, line, id FROM u WHERE ?2 = 'queued'), " \
      "lo AS (UPDATE leases SET n_held = n_held - 1 WHERE ?3 = 'leased' AND id = " \
      "(SELECT o.lease_id FROM o, u)), " \
      "lp AS (INSERT INTO lease_batches(lease_id, batch_id, tenant_id, n_requests, request_ids) " \
      "SELECT ?6::text, batch_id, tenant_id, 1, ARRAY[id] FROM u WHERE ?2 = 'leased' " \
      "ON CONFLICT (lease_id, batch_id) DO UPDATE SET n_requests = lease_batches.n_requests + 1, " \
      "request_ids = coalesce(lease_batches.request_ids, '{}') || excluded.request_ids), " \
      "ln AS (UPDATE leases SET n_held = n_held + 1 WHERE ?2 = 'leased' AND id = ?6::text " \
      "AND EXISTS (SELECT 1 FROM u)), " \
      STORE_PG_RESERVE("u", "CASE WHEN ?3 IN ('queued', 'leased') THEN -1 ELSE 1 END", \
                       "(?3 IN ('queued', 'leased') AND ?2 IN ('succeeded', 'failed')) OR " \
                       "(?3 IN ('succeeded', 'failed') AND ?2 IN ('queued', 'leased'))") \
      " SELECT batch_id FROM u") \
    /* n_held from the parts its claims wrote (LEASE_CLAIM_MANY) */ \
    X(LEASE_INSERT, \
      "INSERT INTO leases(id, worker_id, model, n_requests, created_at, expires_at, n_held) " \
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, (SELECT coalesce(sum(n_requests), 0) FROM lease_batches " \
      "WHERE lease_id = ?1))") \
    X(LEASE_END_IF_EMPTY, \
      "WITH e AS (UPDATE leases SET released_at = ?2 WHERE id = ?1 AND released_at IS NULL " \
      "AND n_held = 0 RETURNING id) " STORE_PG_LEASE_ENDED) \
    X(LEASE_END, \
      "WITH e AS (UPDATE leases SET released_at = ?2 WHERE id = ?1 AND released_at IS NULL " \
      "RETURNING id) " STORE_PG_LEASE_ENDED) \
    X(LEASE_HELD, \
      "SELECT q.id FROM requests q WHERE q.id IN (SELECT unnest(lb.request_ids) FROM " \
      "lease_batches lb WHERE lb.lease_id = ?1) AND q.lease_id = ?1 AND q.status = 'leased' " \
      "ORDER BY q.batch_id, q.id LIMIT ?2") \
    X(LEASE_STOP_IDS, \
      "SELECT q.id FROM requests q WHERE q.id IN (SELECT unnest(lb.request_ids) FROM " \
      "lease_batches lb JOIN batches b ON b.id = lb.batch_id WHERE lb.lease_id = ?1 AND " \
      "(b.status != 'in_progress' OR b.expires_at <= ?2)) AND q.lease_id = ?1 AND " \
      "q.status = 'leased' UNION SELECT request_id FROM results WHERE lease_id = ?1 " \
      "AND error_code IN ('batch_cancelled', 'batch_expired') ORDER BY 1") \
    X(BATCH_QUEUED_IDS, \
      "SELECT request_id, NULL::text FROM requests_queued WHERE batch_id = ?1 LIMIT ?2") \
    X(BATCH_HAS_LEASED, \
      "SELECT 1 FROM lease_batches lb CROSS JOIN LATERAL unnest(lb.request_ids) x(id) JOIN " \
      "requests q ON q.id = x.id WHERE lb.batch_id = ?1 AND lb.request_ids IS NOT NULL AND " \
      "q.lease_id = lb.lease_id AND q.status = 'leased' LIMIT 1") \
    X(BATCH_LEASED_IDS, \
      "SELECT q.id, q.lease_id FROM lease_batches lb CROSS JOIN LATERAL unnest(lb.request_ids) " \
      "x(id) JOIN requests q ON q.id = x.id WHERE lb.batch_id = ?1 AND lb.request_ids IS NOT " \
      "NULL AND q.lease_id = lb.lease_id AND q.status = 'leased' LIMIT ?2") \
    X(DEPTH_QUEUED, \
      "SELECT r.model, count(*) FROM requests_queued x JOIN requests r ON r.id = x.request_id " \
      "GROUP BY r.model") \
    X(DEPTH_LEASED, \
      "SELECT q.model, count(*) FROM leases l JOIN lease_batches lb ON lb.lease_id = l.id " \
      "CROSS JOIN LATERAL unnest(lb.request_ids) x(id) JOIN requests q ON q.id = x.id WHERE " \
      "l.released_at IS NULL AND q.lease_id = l.id AND q.status = 'leased' GROUP BY q.model")

enum store_stmt_id {
#define STORE_SQL_ENUM_(name, sql) S_##name,
    STORE_SQL(STORE_SQL_ENUM_)
    STORE_SQL_WEBHOOK(STORE_SQL_ENUM_)
#undef STORE_SQL_ENUM_
    S__COUNT
};

struct store {
    struct sdb *db;
    int pg;      /* 1: PostgreSQL (STORE_SQL_PG texts, schema_pg.sql), 0: SQLite */
    char *dir;
    char *db_path; /* the SQLite file, or the PostgreSQL URL with its password masked */
    struct store_opts opts;
    struct blob_store *own_blobs; /* the local file store opened when opts.blobs is NULL */
    int depth;   /* open write levels: 0 none, 1 a transaction, >1 savepoints inside it */
    int user_tx; /* the outermost level was opened by store_tx_begin */
    int notify;  /* PostgreSQL: this transaction made work leasable; its COMMIT
                    also NOTIFYs STORE_PG_CHANNEL (store_w_end) */
    struct sdb_stmt *stmts[S__COUNT];
    struct store_ingest_q *inq; /* PostgreSQL: ingest rows not yet written (store_request_add) */
    /* request ids (store_request_id): ULID monotonic mode */
    int64_t rid_ms;      /* timestamp of the last id */
    uint8_t rid_rnd[10]; /* its 80 "random" bits: drawn per new ms, +1 within one */
};

/* The kept statement id, reset and unbound; NULL after logging on failure
 * (*rc gets the ERR_*). */
struct sdb_stmt *store_stmt(struct store *st, enum store_stmt_id id, int *rc);

/* Translate an SQLite result code into an ERR_*, logging the original with
 * `what` (the operation) and the driver's message (sdb_errmsg). */
int store_sqlerr(struct store *st, int sqlite_rc, const char *what);

/* Step a statement that returns no rows (or whose rows are ignored). */
int store_step_done(struct store *st, struct sdb_stmt *s, const char *what);

int store_w_begin(struct store *st);
/* store_w_begin for the row-locked hot paths (leasing, results commit,
 * heartbeat, release, lease sweep, webhook claim, worker last_seen): on
 * PostgreSQL at depth 0 the writer lock is taken shared, so these run
 * concurrently with each other (on every connection and instance) and
 * exclusively of every other writer (store.h, "Several jobd instances").
 * SQLite: store_w_begin. */
int store_w_begin_shared(struct store *st);
int store_w_end(struct store *st, int rc);
int store_r_begin(struct store *st);
int store_r_end(struct store *st, int rc);

/* Bind helpers: NULL text binds SQL NULL. Return 0 or an ERR_*. */
/* store_request_transition without its own savepoint: for callers inside
 * a transaction whose every error rolls the whole of it back (the lease
 * claim, the results commit), where the savepoint bought nothing and cost
 * two round trips per request on PostgreSQL. */
/* acc: NULL, or where the batch counters' changes (n_completed, n_failed)
 * add up until store_count_flush writes them, one UPDATE per batch instead
 * of one per request (the results commit; nothing in between reads them). */
#define STORE_COUNT_ACC_MAX 8
struct store_count_acc {
    int n;
    struct {
        char batch_id[ID_MAX];
        int64_t ok, failed;
    } b[STORE_COUNT_ACC_MAX];
};
int store_req_transition_in(struct store *st, const char *id, enum store_request_status from,
                            enum store_request_status to, const struct store_request_change *ch, int64_t now,
                            struct store_count_acc *acc);
/* Add to a batch's counters: now (acc NULL) or into acc (flushed first
 * when full). 0 or a database error. */
int store_count_add(struct store *st, struct store_count_acc *acc, const char *batch_id, int64_t ok,
                    int64_t failed);
/* Write acc's counters and empty it. 0 or a database error. */
int store_count_flush(struct store *st, struct store_count_acc *acc);
int store_bind_text(struct store *st, struct sdb_stmt *s, int i, const char *v);
int store_bind_int(struct store *st, struct sdb_stmt *s, int i, int64_t v);

/* PostgreSQL array literals for the set-based statements (?N::text[],
 * ?N::bigint[]): store_arr_begin empties b and opens "{", each add appends
 * one element (texts double-quoted and escaped, NULL for a NULL text, a
 * blob as its quoted hex for decode(x, 'hex')), store_arr_end closes it;
 * b->data is then the literal to bind as text. 0 or ERR_NOMEM. */
struct buf;
int store_arr_begin(struct buf *b);
int store_arr_text(struct buf *b, const char *v);
int store_arr_textn(struct buf *b, const char *v, size_t n); /* n bytes of v (up to a NUL) */
int store_arr_int(struct buf *b, int64_t v);
int store_arr_hex(struct buf *b, const void *p, size_t n);
int store_arr_end(struct buf *b);

/* The PostgreSQL ingest queue (store_request_add): drop its rows (the
 * transaction ends without them), free it (store_close). */
void store_ingest_q_drop(struct store *st);
void store_ingest_q_free(struct store *st);

/* Copy a text column into dst (cap bytes incl. NUL); NULL becomes "". */
void store_col_text(struct sdb_stmt *s, int col, char *dst, size_t cap);
/* How store_rows_collect turns rows into array elements. row decodes the
 * current row of s into elem (elem_size bytes, zeroed; ctx is the caller's)
 * and returns 0 or an ERR_*; on error it leaves elem holding nothing to
 * free. release (NULL when elements own no memory) frees what one decoded
 * element owns, not the element itself. what names the query in the log of
 * a step error. */
struct store_rows {
    size_t elem_size;
    int (*row)(struct sdb_stmt *s, void *elem, void *ctx);
    void (*release)(void *elem);
    const char *what;
};

/* Step the bound statement s, decoding each row with how->row into a new
 * heap array (*items, caller frees it and what its elements own) of *n
 * elements in the statement's row order; resets s whatever the return.
 * Only sdb_step / sdb_reset are used, so it serves every driver; text
 * columns are valid only inside row (the sdb.h rule), which copies them.
 *   limit > 0: the array is allocated once with limit zeroed elements (so
 *              *items is non-NULL even when empty); a row beyond the limit
 *              stops the stepping and sets *has_more to 1 (bind LIMIT
 *              limit + 1 to learn whether more exist), else 0.
 *   limit 0:   no cap; the array grows as rows come (NULL when empty);
 *              *has_more is 0.
 * has_more may be NULL. Returns 0, ERR_NOMEM, the error of row, or the
 * driver's step error translated by store_sqlerr (logged with how->what);
 * on error the elements decoded so far are released, the array is freed
 * and nothing is written to the out-parameters. */
int store_rows_collect(struct store *st, struct sdb_stmt *s, const struct store_rows *how, void *ctx,
                       int limit, void **items, size_t *n, int *has_more);
/* store_rows_collect of column 0 (an id) of each row, no limit: a new
 * array (*ids, caller frees; NULL when empty) of *n ids; resets s. 0,
 * ERR_NOMEM or the translated driver error (nothing returned then). */
int store_collect_ids(struct store *st, struct sdb_stmt *s, char (**ids)[ID_MAX], size_t *n);
/* Heap copy of a text column; NULL stays NULL (*err = ERR_NOMEM on failure). */
char *store_col_dup(struct sdb_stmt *s, int col, int *err);

/* Inside store_results_commit's transaction: record the 2xx results just
 * committed (created_at = now) under lease_id of requests with a reuse key
 * into reuse_results (store_reuse.c). 0 or a database error. */
int store_reuse_record(struct store *st, const char *lease_id, int64_t now);

/* Fill *b from a row selected with STORE_BATCH_COLS. ERR_NOMEM/ERR_CORRUPT. */
int store_batch_row(struct sdb_stmt *s, struct store_batch *b);

#endif
