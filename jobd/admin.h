/*
 * admin.h - jobd's offline admin commands: `jobd keys create|list|revoke`.
 *
 * They work directly on the database of a data directory (SQLite in it, or
 * the PostgreSQL database of --database); the daemon need not run. Output
 * is for a terminal: the new key on stdout (shown only this once), the key
 * table on stdout, notes and errors as "jobd: ..." lines on stderr.
 * Main thread, once per process.
 */
#ifndef JOBD_ADMIN_H
#define JOBD_ADMIN_H

/* Run `jobd keys SUB ...`: args[0] is the subcommand ("create", "list" or
 * "revoke"), args[1] the key id of revoke; n_args their count. tenant is
 * --tenant (required by create, which creates the tenant if new; a filter for
 * list), database --database or NULL (SQLite in data_dir). Prints what it did
 * or why not. Returns the exit code: CLI_EXIT_OK, CLI_EXIT_USAGE (unknown
 * subcommand, missing --tenant or key id) or CLI_EXIT_FAIL (the database
 * cannot be opened, no such tenant or key, a bad tenant name, a store error). */
int jobd_keys_run(const char *data_dir, const char *database, const char *tenant,
                  char *const *args, int n_args);

#endif
