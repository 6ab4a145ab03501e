/* A shell-aware lexer for the command policy (internal to src/policy/).
 *
 * It splits a command line into the simple commands a POSIX sh (with the common bash
 * extensions) would run, without running anything: quotes and escapes are removed, the
 * control operators (; & && || | |& newline), subshells ( ), groups { }, the compound
 * keywords (if/then/else/elif/fi, while/until/for/select/do/done, case/esac, function, !,
 * [[ ]], (( ))) and redirections (with here-documents, whose bodies are not commands) are
 * understood. Command substitutions $(...) and `...`, process substitutions <(...) >(...),
 * and the ones inside ${...}, $((...)), double quotes and unquoted here-document bodies are
 * lexed recursively and reported as simple commands of their own.
 *
 * Every simple command (at least one word that is not a reserved word) is handed to a
 * callback as soon as it is complete, innermost substitutions first. Nothing here decides
 * what is allowed: see policy.c.
 *
 * Hostile input: nesting (subshells, substitutions, ${...}, recursive lexing started by the
 * caller) is bounded by max_depth; the input length is bounded by the caller. Errors are
 * reported, never a crash.
 */
#ifndef CAE_POLICY_SHLEX_H
#define CAE_POLICY_SHLEX_H

#include <stdbool.h>
#include <stddef.h>

#include "cae/error.h"

/* One word after quote removal. Expansions ($x, ${x}, $(...), `...`, $((...))) cannot be
 * known before run time: their source text is kept in `text` and `dynamic` is set. */
typedef struct cae_sh_word {
	char *text; /* owned by the lexer, NUL-terminated */
	size_t len;
	bool quoted;  /* some part was quoted or backslash-escaped */
	bool dynamic; /* some part is an expansion */
	bool glob;    /* an unquoted * ? or [ appears */
	bool brace;   /* an unquoted { appears (bash brace expansion may apply) */
	size_t
	    assign_len; /* > 0: an assignment NAME=... or NAME+=...; length up to the '=' incl. */
} cae_sh_word;

/* A simple command. Everything is borrowed and valid only during the callback. */
typedef struct cae_sh_command {
	const cae_sh_word *words;
	size_t n_words;	 /* >= 1 */
	const char *src; /* the command's source text (from its first word to its last token) */
	size_t src_len;
	unsigned depth; /* nesting depth at which it was found (for recursive checks) */
} cae_sh_command;

/* Returns 0 to go on, > 0 to stop the lexer (cae__sh_lex returns that value), < 0 an error
 * (returned as is). */
typedef int (*cae_sh_command_fn)(const cae_sh_command *cmd, void *userdata);

/* Lexes s[0..len) (NUL bytes inside are ordinary characters) starting at nesting depth
 * `depth`. Returns 0 when every simple command was reported, the callback's positive value
 * when it stopped the lexer, -EINVAL on a syntax error the shell would refuse too
 * (unterminated quote, substitution, subshell or case; an unexpected ')'), -ELOOP when the
 * nesting exceeds max_depth, -ENOMEM. err (may be NULL) receives the message of an error
 * found by the lexer, with the byte offset. */
int cae__sh_lex(const char *s, size_t len, unsigned depth, unsigned max_depth, cae_sh_command_fn fn,
		void *userdata, cae_error *err);

#endif
