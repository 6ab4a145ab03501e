/* The patch worker's parser and its pure (in-memory) application core.
 *
 * A patch is text from a model. cae_patch_parse() recognises five forms and turns any of
 * them into one list of commands (a PatchCommand {type, action, target, content, metadata}):
 *
 *   empty        whitespace only: zero commands, not an error.
 *   JSON         a JSON array of {type, action, target, content?, metadata?} (the text starts
 *                with '['). Types: file_edit (actions create, update, delete, append),
 *                shell_command (run), git_operation (add, commit, reset, checkout).
 *   Markdown     fenced code blocks (``` or ~~~, three or more): ```<lang>:<path> (or
 *                ```:<path>) writes the file (file_edit/update); ```bash, ```sh, ```shell,
 *                ```zsh run the block (shell_command/run, one command per block);
 *                ```git gives one git_operation per git command (add, commit -m, reset,
 *                checkout); ```diff / ```patch blocks and blocks holding "*** Begin Patch"
 *                are parsed as the formats below; any other block is skipped with a warning.
 *   apply_patch  the "*** Begin Patch" ... "*** End Patch" format of OpenAI's apply_patch
 *                tool (Add File / Delete File / Update File with Move to, @@ hunks,
 *                "*** End of File").
 *   unified      unified diffs (`diff --git` headers optional, --- / +++, @@ -l,c +l,c @@,
 *                /dev/null for add and delete, "\ No newline at end of file", renames).
 *
 * The diff forms give file_edit commands whose `op` carries the hunks: action create (add),
 * delete, patch (update in place) or move (update with a rename).
 *
 * Applying is pure: cae_patch_apply_hunks() computes one file's new content from its old
 * content; cae_patch_check() computes every file's new content for a whole patch before the
 * executor writes anything (all-or-nothing), reading files through a callback.
 *
 * Ownership: a cae_patch owns everything reachable from it; pointers returned by the getters
 * are borrowed and live as long as the patch. A cae_patch_plan borrows from its patch (free
 * the plan first). Nothing here prints, runs a command or touches the file system.
 *
 * ---- What the executor is expected to do (the part wired on top of this API) ----
 *  1. p = cae_patch_parse(text); on error report err.message (it names the line and column,
 *     or the command index) and run nothing. Log each cae_patch_warning() (unknown blocks).
 *  2. Dry-run: print cae_patch_plan_text(p) (or cae_patch_to_json(p)), change nothing.
 *  3. If cae_patch_is_atomic(p) (the diff forms): plan = cae_patch_check(p, fs) with an fs
 *     callback reading files beneath the workspace. On failure nothing is written and the
 *     whole patch fails with err.message ("hunk 2 of src/a.py did not apply: ..."). On
 *     success write every WRITE step (atomically, beneath the workspace; for a move keep
 *     the old file's mode, then remove old_path), then every DELETE, in step order.
 *  4. Otherwise (JSON / Markdown, continue mode): execute the commands one by one,
 *     each giving a CommandResult; stop_on_error stops at the first failure:
 *       file_edit create|update   write `content` (content_len bytes) to `target`
 *       file_edit append          append `content` to `target` (create if missing)
 *       file_edit delete          remove `target`; if op has hunks, cae_patch_apply_hunks()
 *                                 on the current content must give "" first
 *       file_edit patch|move      read op->path, cae_patch_apply_hunks(), write op->path (or
 *                                 op->move_to, then remove op->path)
 *       shell_command run         sh -c "<target>[ <content>]" in the workspace, 5 min
 *       git_operation add         git add -- <args...>
 *       git_operation commit      git commit [args...] -m <content or "Auto-commit by Worker">
 *       git_operation reset       git reset [args...];  checkout: git checkout <args...>
 *     Paths are relative to the workspace and confined to it by the executor (openat2
 *     RESOLVE_BENEATH); this module does not judge paths.
 *  5. Results: cae_patch_command_to_json(cmd, max_content) gives each result's `command`.
 */
#ifndef CAE_PATCH_H
#define CAE_PATCH_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cae/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bounds on hostile input: a larger text, more commands or a longer line (in the line-based
 * forms) is refused with -E2BIG and a message saying which bound. */
#define CAE_PATCH_MAX_INPUT ((size_t)64 << 20) /* bytes of patch text */
#define CAE_PATCH_MAX_COMMANDS 10000	       /* commands in one patch */
#define CAE_PATCH_MAX_LINE ((size_t)16 << 20)  /* bytes in one line (not JSON) */
#define CAE_PATCH_MAX_WARNINGS 100	       /* kept; later ones are counted */
#define CAE_PATCH_MAX_FILE ((size_t)1 << 30)   /* old file content for apply */

typedef enum cae_patch_format {
	CAE_PATCH_FORMAT_EMPTY,
	CAE_PATCH_FORMAT_JSON,
	CAE_PATCH_FORMAT_MARKDOWN,
	CAE_PATCH_FORMAT_APPLY_PATCH,
	CAE_PATCH_FORMAT_UNIFIED,
} cae_patch_format;

typedef enum cae_patch_type {
	CAE_PATCH_FILE_EDIT,
	CAE_PATCH_SHELL_COMMAND,
	CAE_PATCH_GIT_OPERATION,
	/* a JSON command of an unknown or missing type or action (the worker's rule): it fails with
	 * its `invalid` message when its turn comes, and in continue mode the others still run */
	CAE_PATCH_INVALID,
} cae_patch_type;

typedef enum cae_patch_action {
	/* file_edit from the JSON and Markdown forms */
	CAE_PATCH_CREATE,
	CAE_PATCH_UPDATE,
	CAE_PATCH_DELETE,
	CAE_PATCH_APPEND,
	/* file_edit from the diff forms: `op` carries the hunks */
	CAE_PATCH_PATCH,
	CAE_PATCH_MOVE,
	/* shell_command */
	CAE_PATCH_RUN,
	/* git_operation */
	CAE_PATCH_GIT_ADD,
	CAE_PATCH_GIT_COMMIT,
	CAE_PATCH_GIT_RESET,
	CAE_PATCH_GIT_CHECKOUT,
} cae_patch_action;

typedef enum cae_patch_op_kind {
	CAE_PATCH_OP_ADD,    /* new file: hunks hold only '+' lines; the old content is ignored */
	CAE_PATCH_OP_DELETE, /* hunks (unified diffs) hold the deleted content, or none */
	CAE_PATCH_OP_UPDATE, /* in place, or renamed when move_to is set */
} cae_patch_op_kind;

/* One line of a hunk. text is borrowed from the patch, without the prefix and the line
 * ending, and is not NUL-terminated. */
typedef struct cae_patch_line {
	char kind; /* ' ' context, '-' removed, '+' added */
	const char *text;
	size_t len;
} cae_patch_line;

typedef struct cae_patch_hunk {
	/* The unified header "@@ -old_start,old_count +new_start,new_count @@ heading", when
	 * present (has_range); used as a hint for where the hunk goes, offsets tolerated. */
	bool has_range;
	size_t old_start, old_count, new_start, new_count;
	char *heading; /* text after the second "@@", or NULL */
	/* apply_patch "@@ <line>" headers: each names a line found, in order, before the hunk
	 * (usually a class or function line). NULL-free array of ncontexts strings. */
	char **contexts;
	size_t ncontexts;
	bool end_of_file; /* the old lines end the file ("*** End of File", or a no-newline mark) */
	bool old_no_newline; /* unified "\ No newline at end of file" after the old side */
	bool new_no_newline; /* ... after the new side */
	cae_patch_line *lines;
	size_t nlines;
	size_t source_line; /* 1-based line of the hunk header in the patch text */
} cae_patch_hunk;

typedef struct cae_patch_file_op {
	cae_patch_op_kind kind;
	char *path;    /* the file (old path for an update or move) */
	char *move_to; /* new path of a move, else NULL */
	cae_patch_hunk *hunks;
	size_t nhunks;
} cae_patch_file_op;

typedef struct cae_patch_command {
	cae_patch_type type;
	cae_patch_action action;
	/* file_edit: the path; shell_command: the command line; git_operation: the arguments as
	 * written (paths for add). Never NULL ("" when absent). */
	char *target;
	/* file_edit create/update/append: the bytes (may hold NUL bytes from JSON "\u0000");
	 * patch/move: the diff text of that file; commit: the message. Never NULL. */
	char *content;
	size_t content_len;
	/* JSON object of string values, or NULL. Markdown blocks set "lang". */
	json_t *metadata;
	/* git_operation: the arguments split as a shell would (without -m <msg> for a commit). */
	char **args;
	size_t nargs;
	/* The diff forms: the file operation with its hunks. NULL otherwise. */
	cae_patch_file_op *op;
	size_t source_line; /* 1-based line in the patch text where it starts; 0 for JSON */
	/* CAE_PATCH_INVALID: what is wrong with it (action is then CAE_PATCH_RUN and means
	 * nothing); NULL otherwise. */
	char *invalid;
} cae_patch_command;

typedef struct cae_patch cae_patch;

/* Parses text[0..len) (need not be NUL-terminated). Returns 0 and a new patch in *out, or
 * -EINVAL (malformed; err says where: "line 3, column 14: ..." or "command at index 2: ...")
 * or -E2BIG (a bound) or -ENOMEM. */
CAE_EXPORT int cae_patch_parse(const char *text, size_t len, cae_patch **out, cae_error *err);
/* Builds a patch from an already parsed JSON array of commands (the MCP tool argument).
 * commands is borrowed. Same validation as the JSON form. */
CAE_EXPORT int cae_patch_from_json(const json_t *commands, cae_patch **out, cae_error *err);
CAE_EXPORT void cae_patch_free(cae_patch *p);

CAE_EXPORT cae_patch_format cae_patch_get_format(const cae_patch *p);
CAE_EXPORT size_t cae_patch_count(const cae_patch *p);
/* Borrowed; NULL when i is out of range. */
CAE_EXPORT const cae_patch_command *cae_patch_get(const cae_patch *p, size_t i);
CAE_EXPORT size_t cae_patch_warning_count(const cae_patch *p);
CAE_EXPORT const char *cae_patch_warning(const cae_patch *p, size_t i); /* borrowed */
/* True for the diff forms (and empty patches): check, then write all or nothing. */
CAE_EXPORT bool cae_patch_is_atomic(const cae_patch *p);

/* Stable names: "json", "markdown", "apply_patch", "unified", "empty"; "file_edit", ...;
 * "create", "update", "delete", "append", "patch", "move", "run", "add", "commit", ... */
CAE_EXPORT const char *cae_patch_format_name(cae_patch_format f);
CAE_EXPORT const char *cae_patch_type_name(cae_patch_type t);
CAE_EXPORT const char *cae_patch_action_name(cae_patch_action a);
/* A metadata value (borrowed) or NULL. */
CAE_EXPORT const char *cae_patch_command_meta(const cae_patch_command *c, const char *key);

/* Applies every hunk of op to old[0..old_len) and returns the new content in *new_text
 * (new, NUL-terminated, *new_len bytes). Hunks are located in order, each searched from the
 * end of the previous one: exact match first, then ignoring trailing whitespace, then
 * ignoring all whitespace; the unified line numbers are a hint (the nearest match wins)
 * and offsets are tolerated. Context lines keep the file's text. The file's line ending
 * (CRLF or LF, by majority) is used for added lines, and a missing final newline stays
 * missing unless a "\ No newline" mark says otherwise. For an ADD op old is ignored; for a
 * DELETE op the result must be empty. On failure nothing is produced (*new_text NULL) and
 * err names the file and the hunk: "hunk 2 of src/a.py did not apply: context not found
 * near line 40 ...". Returns 0, -EINVAL (did not apply), -EFBIG (old larger than
 * CAE_PATCH_MAX_FILE) or -ENOMEM. */
CAE_EXPORT int cae_patch_apply_hunks(const char *old, size_t old_len, const cae_patch_file_op *op,
				     char **new_text, size_t *new_len, cae_error *err);

/* ---- Checking a whole patch before writing (all-or-nothing) ---- */

/* How cae_patch_check sees the workspace. read() gives the current content of path
 * (relative, as written in the patch): 0 with a new malloc'd buffer in *data / *len, or
 * -ENOENT when the file does not exist, or another -errno with err set. When data is NULL
 * only existence is asked (0 or -ENOENT). */
typedef struct cae_patch_fs {
	int (*read)(void *userdata, const char *path, char **data, size_t *len, cae_error *err);
	void *userdata;
} cae_patch_fs;

typedef enum cae_patch_step_kind {
	CAE_PATCH_STEP_WRITE,  /* write data to path (create or replace); then remove old_path */
	CAE_PATCH_STEP_APPEND, /* append data to path (create if missing) */
	CAE_PATCH_STEP_DELETE, /* remove path */
	CAE_PATCH_STEP_RUN,    /* a shell_command or git_operation: the executor runs it */
} cae_patch_step_kind;

typedef struct cae_patch_step {
	cae_patch_step_kind kind;
	size_t index;			  /* of the command in the patch */
	const cae_patch_command *command; /* borrowed from the patch */
	const char *path;		  /* WRITE/APPEND/DELETE; for a move the new path */
	const char *old_path;		  /* WRITE of a move: remove after writing; else NULL */
	const char *data;		  /* WRITE: whole new content; APPEND: bytes to add */
	size_t len;
	/* The step depends on a file's content and comes after a RUN step, whose effect on files
	 * cannot be known: data is NULL, compute it at execution time (cae_patch_apply_hunks). */
	bool deferred;
} cae_patch_step;

typedef struct cae_patch_plan cae_patch_plan;

/* Simulates the patch in order over the files fs shows (later commands see earlier ones'
 * results) and computes every file's new content in memory. One step per command. Fails,
 * producing no plan, if any hunk does not apply, a file to update, move or delete does not
 * exist, or a hunked delete does not match: the error names the command and the file.
 * fs may be NULL for patches that never read a file (JSON/Markdown writes). */
CAE_EXPORT int cae_patch_check(const cae_patch *p, const cae_patch_fs *fs, cae_patch_plan **out,
			       cae_error *err);
CAE_EXPORT size_t cae_patch_plan_count(const cae_patch_plan *plan);
CAE_EXPORT const cae_patch_step *cae_patch_plan_step(const cae_patch_plan *plan,
						     size_t i); /* borrowed */
CAE_EXPORT void cae_patch_plan_free(cae_patch_plan *plan);

/* ---- Rendering ---- */

/* The dry-run plan: one line per command, "[1] file_edit update src/a.go (123 bytes)",
 * "[2] shell_command run go test ./...", "[3] file_edit patch src/a.py (2 hunks, +5 -3)",
 * then one "warning: ..." line per warning. New string (never NULL unless out of memory). */
CAE_EXPORT char *cae_patch_plan_text(const cae_patch *p);
/* {"format", "commands": [...], "warnings": [...]}. New reference. */
CAE_EXPORT json_t *cae_patch_to_json(const cae_patch *p);
/* {type, action, target, content, metadata?, args?, path?, move_to?, hunks?}: the
 * PatchCommand plus the diff forms' fields. content is cut to max_content bytes when
 * max_content > 0 (then "content_truncated": true and "content_bytes"). Invalid UTF-8 is
 * replaced by U+FFFD. New reference, NULL on allocation failure. */
CAE_EXPORT json_t *cae_patch_command_to_json(const cae_patch_command *c, size_t max_content);

#ifdef __cplusplus
}
#endif
#endif
