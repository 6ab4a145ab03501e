/* The command policy: which command lines an agent may run.
 *
 * A command line is lexed as sh would lex it (nothing is run): quotes and escapes, ; && ||
 * | & newlines, ( ) subshells, { } groups, if/while/until/for/case, here-documents (their
 * bodies are data), redirections, $(...) and `...` (also inside double quotes and unquoted
 * here-documents), <(...) >(...), leading VAR=x assignments, bash's `time` keyword and
 * brace expansion ({sudo,x} ls, rm -{r,f} x; bounded). Every simple command found is
 * checked; the program is compared by basename (/usr/bin/sudo is sudo). Wrappers are
 * transparent, the command they run is what is checked: env [-i] [-u N] [VAR=x]..., command
 * [-p], exec, nohup, time, nice, timeout, stdbuf, setsid, xargs, busybox, builtin, eval
 * (its arguments are lexed), sh/bash/dash/zsh/ksh -c STRING (the string is lexed), and
 * find's -exec/-execdir/-ok commands; alias and trap bodies are lexed too.
 *
 * The deny list always applies: sudo (and doas, pkexec), su (and runuser),
 * rm with both a recursive and a force flag in any spelling (-rf, -fr, -r -f, -Rf,
 * --recursive --force, --rec --for, ...), chmod with mode 777 in any numeric spelling (777,
 * 0777, 1777...) or a symbolic mode giving rwx to everyone (a+rwx, ugo=rwx), chown,
 * mount/umount, iptables/ip6tables, systemctl/service, kill/killall/pkill,
 * reboot/shutdown/halt/poweroff, dd, mkfs and mkfs.*, fdisk/sfdisk/cfdisk/parted,
 * nc/netcat/ncat, nmap, ssh, scp/sftp/rsync. A program name with an unquoted glob
 * (/usr/bin/su?o) that matches a denied name is denied.
 * The allow list (by category, shaped by use_default / additional /
 * exclude / custom_list) is what the prompt shows; with `enforce` it is also enforced: a
 * program outside it is refused (shell builtins and keywords such as cd, export, true, test,
 * [ are always fine; a program name only known at run time, like $CMD, is refused). An
 * entry of several words ("git status", "cargo test") matches the program followed by those
 * words as its first non-option arguments.
 *
 * Input that the shell itself would refuse (an unterminated quote, $(, `, ( or case), input
 * longer than max_length or nested deeper than max_depth is denied, with the reason.
 *
 * Depends on base and jansson. Thread safety: a cae_policy is immutable after
 * cae_policy_new(); any number of threads may check with it at once.
 */
#ifndef CAE_POLICY_H
#define CAE_POLICY_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cae/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The exit code of a command the policy refused (as a shell's "cannot execute"). */
#define CAE_POLICY_EXIT_CODE 126
/* Longest command line checked: Linux's MAX_ARG_STRLEN, the most one `sh -c` argument
 * can hold. */
#define CAE_POLICY_DEFAULT_MAX_LENGTH (128u * 1024u)
/* Deepest nesting of subshells, substitutions and sh -c strings. */
#define CAE_POLICY_DEFAULT_MAX_DEPTH 32u

/* A list of strings: borrowed, `n` items (items may be NULL when n is 0). A config's
 * `char **` list is passed as (const char *const *)list.items. */
typedef struct cae_policy_list {
	const char *const *items;
	size_t n;
} cae_policy_list;

/* The config's allowed_commands keys plus the bounds. Borrowed: cae_policy_new()
 * copies what it needs. Entries are program names or "program subcommand" phrases. */
typedef struct cae_policy_options {
	bool use_default;	     /* true: start from the default list */
	cae_policy_list additional;  /* added (after exclude) */
	cae_policy_list exclude;     /* removed; a one-word entry also removes "word ..." entries */
	cae_policy_list custom_list; /* the starting list when use_default is false */
	bool enforce;		     /* false: only the deny list refuses */
	size_t max_length;	     /* 0: CAE_POLICY_DEFAULT_MAX_LENGTH */
	unsigned max_depth;	     /* 0: CAE_POLICY_DEFAULT_MAX_DEPTH */
} cae_policy_options;

/* Fills *o with the defaults: use_default true, empty lists, enforce false. */
CAE_EXPORT void cae_policy_options_init(cae_policy_options *o);

/* The categories, in the prompt's order. CAE_POLICY_CAT_CUSTOM holds additional/custom_list
 * entries that are not in the default list. */
typedef enum cae_policy_category {
	CAE_POLICY_CAT_BUILD_PACKAGE = 0, /* "build_package", "Build/Package Management" */
	CAE_POLICY_CAT_TEST,		  /* "test", "Test Execution" */
	CAE_POLICY_CAT_LINTER_FORMATTER,  /* "linter_formatter", "Linter/Formatter" */
	CAE_POLICY_CAT_FILE_OPERATIONS,	  /* "file_operations", "File Operations" */
	CAE_POLICY_CAT_VERSION_CONTROL,	  /* "version_control", "Version Control" */
	CAE_POLICY_CAT_UTILITIES,	  /* "utilities", "Utilities" */
	CAE_POLICY_CAT_CUSTOM,		  /* "custom", "Custom" */
	CAE_POLICY_CAT_COUNT,
} cae_policy_category;

/* Static strings for a category: its JSON key and its label in the prompt text. */
CAE_EXPORT const char *cae_policy_category_key(cae_policy_category c);
CAE_EXPORT const char *cae_policy_category_label(cae_policy_category c);

/* Why a command was refused. */
typedef enum cae_policy_rule {
	CAE_POLICY_RULE_NONE = 0,    /* allowed */
	CAE_POLICY_RULE_DENY_LIST,   /* a denied program or flag combination */
	CAE_POLICY_RULE_NOT_ALLOWED, /* enforce: not in the allow list, or only known at run time */
	CAE_POLICY_RULE_PARSE,	     /* the command line could not be parsed */
	CAE_POLICY_RULE_LIMIT,	     /* too long or nested too deeply */
} cae_policy_rule;

#define CAE_POLICY_PROGRAM_MAX 128
#define CAE_POLICY_COMMAND_MAX 512
#define CAE_POLICY_REASON_MAX 768

/* The outcome of a check. Fixed-size, no allocation; the strings are NUL-terminated valid
 * UTF-8 without control characters (cut at a character boundary when too long). */
typedef struct cae_policy_verdict {
	bool allowed;
	cae_policy_rule rule;
	char program[CAE_POLICY_PROGRAM_MAX]; /* the refused program (basename), or "" */
	char command[CAE_POLICY_COMMAND_MAX]; /* the refused simple command's text, or "" */
	/* e.g. "command 'sudo' is not allowed: privilege escalation"; "" when allowed */
	char reason[CAE_POLICY_REASON_MAX];
} cae_policy_verdict;

typedef struct cae_policy cae_policy;

/* Returns a new policy (NULL opts: the defaults), or NULL with err set (-ENOMEM, or -EINVAL
 * for an empty list entry). Free with cae_policy_free(). */
CAE_EXPORT cae_policy *cae_policy_new(const cae_policy_options *opts, cae_error *err);
CAE_EXPORT void cae_policy_free(cae_policy *p); /* accepts NULL */

/* Checks a shell command line (as given to `sh -c`). Fills *v (allowed or denied, with the
 * reason) and returns 0; returns -EINVAL for NULL arguments and -ENOMEM on allocation
 * failure, in which case *v is still filled, as denied. Stops at the first refused
 * simple command. */
CAE_EXPORT int cae_policy_check(const cae_policy *p, const char *cmdline, cae_policy_verdict *v);
/* The same for a command line of `len` bytes (NUL bytes are ordinary characters). */
CAE_EXPORT int cae_policy_check_n(const cae_policy *p, const char *cmdline, size_t len,
				  cae_policy_verdict *v);
/* Checks an argv executed directly, without a shell (NULL-terminated, argv[0] the program):
 * the same rules on the words as given (no quote removal, no operators); a wrapped sh -c
 * string is lexed. An empty argv is refused. */
CAE_EXPORT int cae_policy_check_argv(const cae_policy *p, const char *const *argv,
				     cae_policy_verdict *v);

/* The stderr of a refused command: "<reason>\n" followed by "  in: <command>\n" when the
 * command text says more than the program name. Returns a new string ("" when allowed), or
 * NULL on allocation failure. */
CAE_EXPORT char *cae_policy_verdict_stderr(const cae_policy_verdict *v);

/* Is this entry (a program name or a "program subcommand" phrase) in the allow list? */
CAE_EXPORT bool cae_policy_is_listed(const cae_policy *p, const char *entry);
CAE_EXPORT bool cae_policy_enforced(const cae_policy *p);

/* The allow list by category: a new JSON object
 * {"build_package": [...], "test": [...], "linter_formatter": [...], "file_operations":
 * [...], "version_control": [...], "utilities": [...]} with every key present, plus
 * "custom": [...] when there are entries outside the default list. NULL on ENOMEM. */
CAE_EXPORT json_t *cae_policy_allowed_json(const cae_policy *p);
/* The same as prompt text: one line per
 * non-empty category, "Label: a, b, c", lines separated by "\n" with no trailing newline.
 * A new string, or NULL on ENOMEM. */
CAE_EXPORT char *cae_policy_allowed_text(const cae_policy *p);

#ifdef __cplusplus
}
#endif
#endif
