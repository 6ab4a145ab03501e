/* The native text editor: `view`, `create`, `str_replace`, `insert`, `undo_edit` on the files of
 * one workspace directory.
 *
 * Wire format: the text of Anthropic's reference text editor (`str_replace_based_edit_tool` /
 * `str_replace_editor`): a file view is numbered like `cat -n` ("%6d\t") under
 * "Here's the result of running `cat -n` on {path}:", an edit answers with a ±4-line snippet and
 * a review hint, errors are sentences an agent can act on. A compatibility rendering gives the
 * result shape of the npm `mcp-server-text-editor` (bhouston): one JSON text
 * {"success","message","content"}.
 *
 * Beyond the reference:
 *  - every path is confined to the workspace with openat2(RESOLVE_BENEATH) from a directory fd
 *    opened once; relative paths resolve against the workspace, absolute ones must lie under
 *    the display root (how the agent sees the workspace, e.g. "/workspace/project");
 *  - tabs are never expanded, CRLF files and a missing final newline are preserved, new_str is
 *    taken literally, binary and non-UTF-8 files are refused;
 *  - writes are atomic (staged file, fsync, rename) and keep the file's mode; each is a
 *    transaction of the workspace's journal (base/txn.h, beside the workspace), so a process
 *    killed mid-write leaves the file old or new and, once recovered, no staged file;
 *    cae_editor_new first recovers what a killed process left;
 *  - undo_edit only undoes what the edit wrote: when the file changed since (a command,
 *    another process) or was removed, it refuses, says so, and keeps the history;
 *  - file size, output length and undo memory are bounded (cae_editor_limits).
 *
 * Line model: a file is split at "\n"; a final "\n" ends the last line (it does not start an
 * empty one), so "a\nb\n" and "a\nb" both have 2 lines. In a file whose every line ends in
 * "\r\n", the "\r" is part of the line ending: views do not show it, old_str/new_str may use
 * "\n" (or "\r\n"), and edits write "\r\n".
 *
 * A cae_editor serialises its calls with an internal mutex, so it may be shared by threads.
 * The workspace directory is opened once: a directory later put in its place is not seen.
 */
#ifndef CAE_EDITOR_H
#define CAE_EDITOR_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cae/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cae_editor cae_editor;

typedef struct cae_editor_limits {
	/* Largest file viewed or edited, and largest result of an edit. */
	size_t max_file_bytes;
	/* A view (file or directory) is clipped after this many characters. */
	size_t max_output_chars;
	/* Edits remembered per file (0: undo disabled). */
	unsigned undo_depth;
	/* Bytes of previous contents kept over all files; the oldest go first. */
	size_t undo_budget_bytes;
	/* Entries read per directory in a directory view (the first ones in name order). */
	size_t max_dir_entries;
	/* Workspace-relative paths never written (create, str_replace, insert, undo_edit refuse
	 * a target at or below one, however the path is spelt: links, ".", ASCII case);
	 * viewing them stays allowed. Borrowed here, copied by cae_editor_new. NULL/0: none
	 * (cae_editor_limits_default). */
	const char *const *protected_paths;
	size_t n_protected_paths;
} cae_editor_limits;

#define CAE_EDITOR_DEFAULT_MAX_FILE_BYTES ((size_t)32 << 20)
#define CAE_EDITOR_DEFAULT_MAX_OUTPUT_CHARS ((size_t)16000)
#define CAE_EDITOR_DEFAULT_UNDO_DEPTH 10u
#define CAE_EDITOR_DEFAULT_UNDO_BUDGET_BYTES ((size_t)64 << 20)
#define CAE_EDITOR_DEFAULT_MAX_DIR_ENTRIES ((size_t)10000)

/* Fills *limits with the defaults above. */
CAE_EXPORT void cae_editor_limits_default(cae_editor_limits *limits);

typedef enum cae_editor_command {
	CAE_EDITOR_CMD_UNKNOWN = 0,
	CAE_EDITOR_CMD_VIEW,
	CAE_EDITOR_CMD_CREATE,
	CAE_EDITOR_CMD_STR_REPLACE,
	CAE_EDITOR_CMD_INSERT,
	CAE_EDITOR_CMD_UNDO_EDIT,
} cae_editor_command;

/* The name of a command ("view", ...), or "unknown". Static string. */
CAE_EXPORT const char *cae_editor_command_name(cae_editor_command cmd);

typedef struct cae_editor_result {
	bool is_error;		    /* a tool error: text says what was wrong and what is valid */
	char *text;		    /* owned; the reference's output or error text (valid UTF-8) */
	char *summary;		    /* owned; one-line summary (the bhouston "message") */
	char *path;		    /* owned; the path in display form, NULL if none was usable */
	cae_editor_command command; /* the command run, CAE_EDITOR_CMD_UNKNOWN if none */
} cae_editor_result;

/* Frees the strings and zeroes the struct. Accepts a zeroed struct. */
CAE_EXPORT void cae_editor_result_clear(cae_editor_result *res);

/* The bhouston `mcp-server-text-editor` shape of a result: a new JSON text
 * {"success":true,"message":summary,"content":text} or {"success":false,"message":text}.
 * NULL on allocation failure. */
CAE_EXPORT char *cae_editor_result_compat_text(const cae_editor_result *res);

/* Opens the workspace `root_path` (a host directory, opened once as O_PATH|O_DIRECTORY),
 * making its journal directory (<root_path>/../.cae-journal, else <root_path>/.cae-journal)
 * and completing or rolling back the transactions of dead processes found there.
 * display_root (absolute; NULL = root_path) is how the agent sees that directory; paths in
 * outputs use it. limits is copied (NULL = defaults). Returns a new editor, or NULL with err
 * set. */
CAE_EXPORT cae_editor *cae_editor_new(const char *root_path, const char *display_root,
				      const cae_editor_limits *limits, cae_error *err);
/* Frees the editor and its undo history. Accepts NULL. */
CAE_EXPORT void cae_editor_free(cae_editor *ed);

/* Runs one call. args (borrowed) is the tool's argument object: command, path, file_text,
 * old_str, new_str, insert_line, view_range; other keys (e.g. bhouston's description) are
 * ignored. Returns 0 with *res filled (res->is_error for tool errors, including bad
 * arguments), or -ENOMEM with *res cleared. */
CAE_EXPORT int cae_editor_call(cae_editor *ed, json_t *args, cae_editor_result *res);

/* A call's arguments, checked (cae_editor_parse) and ready to run (cae_editor_run), here or
 * in an environment's helper. Strings are borrowed; lengths are byte counts. */
typedef struct cae_editor_request {
	cae_editor_command command;
	const char *path;
	size_t path_len;
	const char *text; /* create: file_text; str_replace: old_str */
	size_t text_len;
	const char *new_str; /* str_replace (NULL = ""), insert */
	size_t new_len;
	long long line; /* insert: insert_line */
	bool has_range; /* view: view_range given */
	long long range[2];
} cae_editor_request;

/* Checks a call's arguments (as cae_editor_call does): 0 with *req filled (strings borrowed
 * from args), 1 with *res an error result the agent can act on, or -ENOMEM. */
CAE_EXPORT int cae_editor_parse(json_t *args, cae_editor_request *req, cae_editor_result *res);
/* Runs a checked request; returns as cae_editor_call. */
CAE_EXPORT int cae_editor_run(cae_editor *ed, const cae_editor_request *req,
			      cae_editor_result *res);

/* Direct entry points, same semantics and return values as cae_editor_call. Strings are
 * borrowed; lengths are byte counts (the strings may not contain NUL). */
/* view_range: NULL, or {start, end} (end -1 = end of file). */
CAE_EXPORT int cae_editor_view(cae_editor *ed, const char *path, const long long *view_range,
			       cae_editor_result *res);
CAE_EXPORT int cae_editor_create(cae_editor *ed, const char *path, const char *file_text,
				 size_t len, cae_editor_result *res);
/* new_str NULL = "" (delete old_str). */
CAE_EXPORT int cae_editor_str_replace(cae_editor *ed, const char *path, const char *old_str,
				      size_t old_len, const char *new_str, size_t new_len,
				      cae_editor_result *res);
/* Inserts new_str as whole lines after line insert_line (0 = at the top). */
CAE_EXPORT int cae_editor_insert(cae_editor *ed, const char *path, long long insert_line,
				 const char *new_str, size_t new_len, cae_editor_result *res);
CAE_EXPORT int cae_editor_undo_edit(cae_editor *ed, const char *path, cae_editor_result *res);

/* Bytes of previous contents currently held for undo (for tests and metrics). */
CAE_EXPORT size_t cae_editor_undo_bytes(cae_editor *ed);

/* ---- an MCP stdio text-editor server as the editor (text_editor_mcp.mode: mcp) ----------
 *
 * cae_editor_mcp is the TextEditorMCPClient of the product's design: it drives any MCP stdio
 * text-editor server (e.g. `npx -y mcp-server-text-editor`) as the text_editor tool. It speaks
 * MCP as a client (initialize, notifications/initialized, tools/list, then tools/call per
 * call) over a byte channel the caller runs: requests are written to a descriptor (the
 * server's stdin) and what the server writes on stdout is fed in (cae_editor_mcp_feed), so
 * the server can run wherever commands run (src/tools/editor-mcp.c runs it as a command of
 * the environment, through cae_backend_exec's live io, on every backend).
 *
 * Each call's arguments are checked as the native editor checks them (cae_editor_parse) and
 * its path confined to the workspace before anything is sent: a relative path is made
 * absolute under display_root, one outside it (absolute elsewhere, `..` above it) is refused
 * with the native editor's words, and a write at or below a protected path is refused. The
 * server runs with the confinement of commands, so a link leading out leads where a command
 * could go, no further. The result is the server's text content (the npm server's
 * {"success","message","content"} JSON unwrapped: content is the text, message the summary,
 * success false an error), cut to max_output_chars characters, valid UTF-8.
 *
 * What the server sends is untrusted: lines longer than about twice max_file_bytes are
 * dropped (the JSON-RPC framer), every line is parsed with the JSON-RPC layer's depth bound
 * and validated; a line that is not JSON-RPC, an answer of the wrong shape, an oversized
 * answer, a server that ends (cae_editor_mcp_closed), a cancellation or no answer within
 * timeout_ms fail the call with a clear error, never a hang. After such a failure the server
 * is in an unknown state: cae_editor_mcp_usable turns false and the caller ends it.
 * Calls are serialised; feed and closed may be called from another thread. */
typedef struct cae_editor_mcp cae_editor_mcp;

typedef struct cae_editor_mcp_options {
	int in_fd;		  /* the server's stdin (borrowed; made non-blocking) */
	const char *tool;	  /* the server's tool: "text_editor" (copied) */
	const char *display_root; /* the workspace as the agent and the server see it (copied) */
	const cae_editor_limits *limits; /* max_file_bytes, max_output_chars, protected paths
					  * (copied; NULL: defaults) */
	long long timeout_ms;		 /* a call, the handshake of the first included */
} cae_editor_mcp_options;

/* A new client (NULL with err set). */
CAE_EXPORT cae_editor_mcp *cae_editor_mcp_new(const cae_editor_mcp_options *o, cae_error *err);
/* Bytes the server wrote on its stdout. */
CAE_EXPORT void cae_editor_mcp_feed(cae_editor_mcp *c, const char *data, size_t len);
/* The server is gone (why: borrowed, copied, e.g. its exit status): the call waiting and every
 * later one fail with it. */
CAE_EXPORT void cae_editor_mcp_closed(cae_editor_mcp *c, const char *why);
/* False once the server is gone, or after a call that timed out, was cancelled or got an
 * answer that is not JSON-RPC (the server's state is unknown then), or found no such tool. */
CAE_EXPORT bool cae_editor_mcp_usable(cae_editor_mcp *c);
/* Runs one text_editor call (args borrowed, as cae_editor_call) through the server.
 * cancel_fd (-1: none) readable = stop waiting. Returns 0 with *res filled (is_error for the
 * tool's errors, the server's included), or -errno with err set and *res cleared: -EPIPE (the
 * server is gone), -ETIMEDOUT, -ECANCELED, -EPROTO (an answer that is not JSON-RPC or not a
 * tool result, or too large), -ENOENT (the server has no such tool), -ENOMEM. */
CAE_EXPORT int cae_editor_mcp_call(cae_editor_mcp *c, json_t *args, int cancel_fd,
				   cae_editor_result *res, cae_error *err);
/* Frees the client. Accepts NULL. Nothing may feed it any more. */
CAE_EXPORT void cae_editor_mcp_free(cae_editor_mcp *c);

#ifdef __cplusplus
}
#endif
#endif
