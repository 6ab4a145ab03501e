/* Internal to src/backend: the channel table of the backends whose environments run a
 * cae-helper (docker, kubernetes). A channel is one multiplexed stream to an environment's
 * helper, shared by this process's commands on that environment: found or opened by
 * cae__chan_acquire, counted while commands use it, retired (taken out of the table, closed
 * when its last command ends) when its stream fails or the environment goes. A channel
 * without a helper is one too: it says why there is none, and commands then run otherwise.
 *
 * The table owns its channels; each backend owns its table and says, in its cae_chan_ops,
 * how a stream reaches its helper, where push credentials come from, how to tell that the
 * environment went, and how a command runs without a helper. */
#ifndef CAE_BACKEND_CHAN_H
#define CAE_BACKEND_CHAN_H

#include "backend/backend-internal.h"

#include "cae/net.h"

#include <pthread.h>
#include <stdbool.h>

typedef struct cae_chan {
	struct cae_chan *next;
	struct cae_chan_table *t; /* its table */
	char *uuid;
	cae_helper_mux *m; /* NULL: this environment has no helper that answers */
	char *why;	   /* ... and why, when it should have one (for warnings and errors) */
	char *target;	   /* push credentials: "host user forge"; NULL: none */
	int refs;	   /* commands using it */
	bool retired;	   /* out of the table: closed when the last command ends */
	cae_net_proxy *px; /* the filtering proxy its helper's connections go to; NULL: none */
	char *forge;	   /* the forge it was cloned from ("host:port"; the forge rule) */
	char *net_dir;	   /* its listeners' handover directory (net-handover.h); NULL: none */
	cae_helper_forward **fwd; /* port forwards, under the table's lock */
	size_t n_fwd;
	struct cae_pkgcache_share *share; /* its share of the caches' server; NULL: none */
} cae_chan;

typedef struct cae_chan_ops {
	/* Opens uuid's channel into c (c->t and c->uuid set, the rest empty): c->m the helper's
	 * stream (cae__chan_credentials on success, cae__chan_unanswered when a helper that
	 * should be there did not answer), or c->m left NULL when the environment has none.
	 * Fails (-ENOENT, -ESRCH, -EAGAIN, ...) when the environment cannot run anything.
	 * preparing: for the prepare's own commands (the environment is not ready yet). */
	int (*open)(cae_backend *b, cae_chan *c, bool preparing, cae_error *err);
	/* After a stream failed during a call: 0 when uuid's environment still runs (the
	 * failure was the helper's), else the error saying that it stopped or went (set). */
	int (*gone)(cae_backend *b, const char *uuid, cae_error *err);
	/* Runs req without a helper, in cwd (checked beneath the workspace): 0 or an error. */
	int (*plain)(cae_backend *b, const char *uuid, const cae_exec_request *req, const char *cwd,
		     cae_run_result *res, cae_error *err);
	/* May be NULL: the error of a command, edit or file operation whose channel could not
	 * be had (r from open), as the caller sees it. */
	int (*unusable)(cae_backend *b, int r, const char *uuid, cae_error *err);
	const char *workspace; /* where commands are confined, as they see it */
	const char *project;   /* the project (relative working directories, the editor) */
	const char *what;      /* what the environment is: "container", "pod" */
	const char *plain_how; /* what a command without a helper ran as (its warning) */
	/* appended to the error of a stream that ended during a command while the environment
	 * still runs; NULL: nothing */
	const char *failed_note;
	/* a channel without a helper is opened again for every use (the environment may have
	 * gone without anything else noticing), rather than kept */
	bool reopen_plain;
	/* the shared package caches are not on the environment's file system: with the
	 * network its own, the helper's loopback listener serves them (pkgcache-serve.c) */
	bool serve_caches;
} cae_chan_ops;

/* The heartbeat interval (seconds, as text for the helper's --heartbeat) of a stream helper
 * whose idle lifetime is cfg's docker.helper_lifetime_seconds: well within it, so that a
 * live manager always keeps its container or pod; at most 10 s, at least 1. */
void cae__chan_heartbeat(const cae_config *cfg, char *out, size_t size);

/* One backend's channels. */
typedef struct cae_chan_table {
	cae_backend *b;
	const cae_chan_ops *ops;
	pthread_mutex_t lock;
	cae_chan *list; /* the live ones, under lock */
} cae_chan_table;

void cae__chan_table_init(cae_chan_table *t, cae_backend *b, const cae_chan_ops *ops);
/* Closes every channel (no command may still use one). */
void cae__chan_table_fini(cae_chan_table *t);

/* uuid's environment goes (removal, re-prepare): its channels are retired. */
void cae__chan_forget(cae_chan_table *t, const char *uuid);

/* Gives c push credentials: git's requests from its commands are answered for target
 * ("host user forge", NULL: none) by cae__git_credential_answer. */
void cae__chan_credentials(cae_chan *c, const char *target);
/* The helper c should have did not answer (e): c->why says so, and the event
 * <backend>.helper_unavailable is logged. */
void cae__chan_unanswered(cae_chan *c, const cae_error *e);

/* A command in uuid's environment: through its helper (a stream found dead before the
 * command was taken is replaced once: the command did not run; one that ends during the
 * command is reported, and the channel retired), else through ops->plain, with a warning
 * when a helper should have answered (a command with live input needs the helper). */
int cae__chan_exec(cae_chan_table *t, const char *uuid, bool preparing, const cae_exec_request *req,
		   cae_run_result *res, cae_error *err);
/* The text editor, run by uuid's helper on the project (-EOPNOTSUPP without one). An edit
 * that the helper did not answer may have happened: it is not tried again. */
int cae__chan_edit(cae_chan_table *t, const char *uuid, const cae_editor_limits *limits,
		   const cae_editor_request *req, cae_editor_result *res, cae_error *err);
/* The patch worker's file operations, run by uuid's helper (-EOPNOTSUPP without one). */
int cae__chan_fs(cae_chan_table *t, const char *uuid, const cae_fs_request *q, cae_fs_reply *rep,
		 cae_error *err);

/* uuid's channel with its helper for one use (cae__chan_release after): NULL with *r (and
 * err) set when it could not be had or has no helper. */
cae_chan *cae__chan_helper_for(cae_chan_table *t, const char *uuid, int *r, cae_error *err);
void cae__chan_release(cae_chan_table *t, cae_chan *c);

/* ---- the network (net-chan.c) ---- */

/* After c's stream opened: with a filtered network, the helper listens on the
 * environment's loopback and its connections go to a proxy of c's (c->px), and every
 * command gets the proxy variables. A failure is logged (<backend>.network_unavailable):
 * the environment then has no network at all. */
void cae__chan_net_start(cae_chan *c);
/* Moves c's proxy's refusals into res->network_denied. */
void cae__chan_net_report(cae_chan *c, cae_run_result *res);
/* uuid's refusals since they were last taken (cae_backend_network_denied). */
json_t *cae__chan_network_denied(cae_chan_table *t, const char *uuid);
/* A port forward to port in uuid's environment (cae_backend_port_forward). */
int cae__chan_port_forward(cae_chan_table *t, const char *uuid, int port, int *host_port,
			   cae_error *err);
/* c's forwards and proxy (before and after its stream is closed). */
void cae__chan_net_close_forwards(cae_chan *c);
void cae__chan_net_free(cae_chan *c);

#endif
