/* Secrets that nothing cae shows may contain, and the masking that hides them.
 *
 * A cae_secrets holds registered secrets (tokens from the configuration, say). Masking a
 * text replaces every occurrence of a registered secret by "***", and the credentials of any
 * URL by "***" as well: https://user:token@host/x -> https:// ***@host/x (without the space,
 * which only keeps this comment a comment). A NULL cae_secrets masks URLs only.
 *
 * Who owns one: a session owns the one its tool output is masked with; a logger owns the one
 * its lines are masked with (cae_log_secrets). The session registers each of its secrets in
 * both, so masking does not depend on whether a logger exists.
 *
 * Thread-safe: secrets may be added while other threads mask.
 */
#ifndef CAE_SECRETS_H
#define CAE_SECRETS_H

#include "cae/export.h"

#include <jansson.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CAE_SECRETS_MIN_LEN 4 /* shorter secrets are refused (they would mangle every text) */

typedef struct cae_secrets cae_secrets;

/* An empty set. NULL on ENOMEM. */
CAE_EXPORT cae_secrets *cae_secrets_new(void);
/* Wipes the stored secrets and frees. Accepts NULL. */
CAE_EXPORT void cae_secrets_free(cae_secrets *s);

/* Registers a secret (copied). NULL or "" is ignored (returns 0), as is a NULL s; a secret
 * shorter than CAE_SECRETS_MIN_LEN is refused with -EINVAL; -ENOSPC past 256 secrets;
 * -ENOMEM. Adding the same secret twice is harmless. Longer secrets are replaced first, so
 * that a secret containing another is masked whole. */
CAE_EXPORT int cae_secrets_add(cae_secrets *s, const char *secret);

/* A new string: text with URL credentials and every registered secret masked. s may be
 * NULL (URLs only). NULL only on ENOMEM (or text NULL). */
CAE_EXPORT char *cae_secrets_mask(const cae_secrets *s, const char *text);
/* Same for the len bytes at text (may contain NULs); *out_len (may be NULL) receives the
 * new length. */
CAE_EXPORT char *cae_secrets_maskn(const cae_secrets *s, const char *text, size_t len,
				   size_t *out_len);

/* A new JSON string of the len bytes at text, masked, made valid UTF-8, and when max_bytes is
 * not 0 cut to at most max_bytes bytes, the cut marked "...[truncated]". NULL on ENOMEM. */
CAE_EXPORT json_t *cae_secrets_json_string(const cae_secrets *s, const char *text, size_t len,
					   size_t max_bytes);
/* A new deep copy of value (borrowed) with every string as cae_secrets_json_string makes it
 * and every object key masked; containers nested deeper than 32 levels become the string
 * "[nested too deep]". NULL on ENOMEM. */
CAE_EXPORT json_t *cae_secrets_mask_json(const cae_secrets *s, const json_t *value,
					 size_t max_bytes);

#ifdef __cplusplus
}
#endif
#endif
