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

#ifdef __cplusplus
}
#endif
#endif
