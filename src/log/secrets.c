/* Registered secrets and the masking of texts and JSON values: what keeps tokens out of tool
 * output (owned by the session) and out of log lines (owned by the logger). */
#include "cae/secrets.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/macro.h"
#include "base/utf8.h"
#include "base/banned.h"

#define MAX_JSON_DEPTH 32
#define MAX_SECRETS 256

struct secret {
	char *s;
	size_t len;
};

struct cae_secrets {
	pthread_mutex_t lock; /* guards v and n; masking holds it so that v stays put */
	struct secret *v;     /* longest first */
	size_t n;
};

cae_secrets *cae_secrets_new(void)
{
	cae_secrets *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (pthread_mutex_init(&s->lock, NULL) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

void cae_secrets_free(cae_secrets *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		explicit_bzero(s->v[i].s, s->v[i].len);
		free(s->v[i].s);
	}
	free(s->v);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int cae_secrets_add(cae_secrets *s, const char *secret)
{
	if (!s || !secret || !*secret)
		return 0;
	size_t len = strlen(secret);
	if (len < CAE_SECRETS_MIN_LEN)
		return -EINVAL;
	int r = 0;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].len == len && memcmp(s->v[i].s, secret, len) == 0)
			goto out;
	if (s->n >= MAX_SECRETS) {
		r = -ENOSPC;
		goto out;
	}
	struct secret *a = realloc(s->v, (s->n + 1) * sizeof(*a));
	if (!a) {
		r = -ENOMEM;
		goto out;
	}
	s->v = a;
	char *copy = strdup(secret);
	if (!copy) {
		r = -ENOMEM;
		goto out;
	}
	/* keep longest first, so that a secret containing another is replaced whole */
	size_t pos = 0;
	while (pos < s->n && s->v[pos].len >= len)
		pos++;
	memmove(&a[pos + 1], &a[pos], (s->n - pos) * sizeof(*a));
	a[pos].s = copy;
	a[pos].len = len;
	s->n++;
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Masking holds the lock, which is not part of the logical state of a const set. */
static void lock(const cae_secrets *s)
{
	if (s)
		pthread_mutex_lock(&((cae_secrets *)s)->lock);
}

static void unlock(const cae_secrets *s)
{
	if (s)
		pthread_mutex_unlock(&((cae_secrets *)s)->lock);
}

static bool authority_end(unsigned char c)
{
	return c == '/' || c == '?' || c == '#' || c <= ' ' || c == '"' || c == '\'' || c == '<' ||
	       c == '>' || c == '`' || c == '\\' || c == 0x7f;
}

static bool scheme_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '+' || c == '-' || c == '.';
}

/* Appends text with the userinfo of every "scheme://userinfo@host" replaced by ***. */
static int mask_urls(cae_buf *out, const char *text, size_t len)
{
	size_t i = 0, last = 0;
	int r;
	while (i + 3 <= len) {
		const char *hit = memmem(text + i, len - i, "://", 3);
		if (!hit)
			break;
		size_t sep = (size_t)(hit - text);
		size_t auth = sep + 3;
		i = auth;
		if (sep == 0 || !scheme_char((unsigned char)text[sep - 1]))
			continue;
		size_t end = auth, at = SIZE_MAX;
		while (end < len && !authority_end((unsigned char)text[end])) {
			if (text[end] == '@')
				at = end;
			end++;
		}
		if (at == SIZE_MAX || at == auth)
			continue;
		if ((r = cae__buf_append(out, text + last, auth - last)) < 0 ||
		    (r = cae__buf_append(out, "***", 3)) < 0)
			return r;
		last = at; /* the '@' and what follows are kept */
		i = at + 1;
	}
	return cae__buf_append(out, text + last, len - last);
}

/* The secrets pass; the caller holds s->lock (or s is NULL). Takes *data (malloc'd). */
static int mask_secrets_locked(const cae_secrets *s, char **data, size_t *len)
{
	if (!s)
		return 0;
	for (size_t k = 0; k < s->n; k++) {
		const struct secret *sec = &s->v[k];
		const char *p = *data, *end = *data + *len;
		const char *hit = memmem(p, *len, sec->s, sec->len);
		if (!hit)
			continue;
		cae_buf b;
		cae__buf_init(&b, SIZE_MAX);
		int r = 0;
		while (hit && r >= 0) {
			r = cae__buf_append(&b, p, (size_t)(hit - p));
			if (r >= 0)
				r = cae__buf_append(&b, "***", 3);
			p = hit + sec->len;
			hit = memmem(p, (size_t)(end - p), sec->s, sec->len);
		}
		if (r >= 0)
			r = cae__buf_append(&b, p, (size_t)(end - p));
		if (r < 0) {
			cae__buf_clear(&b);
			return r;
		}
		size_t n;
		char *nd = cae__buf_steal(&b, &n);
		if (!nd)
			return -ENOMEM;
		free(*data);
		*data = nd;
		*len = n;
	}
	return 0;
}

static char *mask_locked(const cae_secrets *s, const char *text, size_t len, size_t *out_len)
{
	cae_buf b;
	cae__buf_init(&b, SIZE_MAX);
	if (mask_urls(&b, text, len) < 0) {
		cae__buf_clear(&b);
		return NULL;
	}
	size_t n;
	char *data = cae__buf_steal(&b, &n);
	if (!data)
		return NULL;
	if (mask_secrets_locked(s, &data, &n) < 0) {
		free(data);
		return NULL;
	}
	if (out_len)
		*out_len = n;
	return data;
}

char *cae_secrets_maskn(const cae_secrets *s, const char *text, size_t len, size_t *out_len)
{
	if (!text)
		return NULL;
	lock(s);
	char *r = mask_locked(s, text, len, out_len);
	unlock(s);
	return r;
}

char *cae_secrets_mask(const cae_secrets *s, const char *text)
{
	return text ? cae_secrets_maskn(s, text, strlen(text), NULL) : NULL;
}

static json_t *json_string_locked(const cae_secrets *s, const char *text, size_t len,
				  size_t max_bytes)
{
	size_t n;
	_cleanup_free_ char *red = mask_locked(s, text, len, &n);
	if (!red)
		return NULL;
	static const char mark[] = "...[truncated]";
	if (max_bytes >= sizeof(mark) && n > max_bytes) {
		n = cae__utf8_floor(red, max_bytes - (sizeof(mark) - 1));
		memcpy(red + n, mark, sizeof(mark));
		n += sizeof(mark) - 1;
	}
	if (cae__utf8_is_valid(red, n))
		return json_stringn(red, n);
	size_t m;
	_cleanup_free_ char *clean = cae__utf8_sanitize(red, n, &m);
	return clean ? json_stringn(clean, m) : NULL;
}

json_t *cae_secrets_json_string(const cae_secrets *s, const char *text, size_t len,
				size_t max_bytes)
{
	if (!text)
		return NULL;
	lock(s);
	json_t *r = json_string_locked(s, text, len, max_bytes);
	unlock(s);
	return r;
}

static json_t *mask_json_locked(const cae_secrets *s, const json_t *v, size_t max_bytes, int depth)
{
	if (!v)
		return json_null();
	switch (json_typeof(v)) {
	case JSON_STRING:
		return json_string_locked(s, json_string_value(v), json_string_length(v),
					  max_bytes);
	case JSON_OBJECT: {
		if (depth >= MAX_JSON_DEPTH)
			return json_string("[nested too deep]");
		json_t *o = json_object();
		const char *key;
		json_t *val;
		json_object_foreach((json_t *)v, key, val)
		{
			_cleanup_free_ char *k = mask_locked(s, key, strlen(key), NULL);
			json_t *c = mask_json_locked(s, val, max_bytes, depth + 1);
			if (!o || !k || !c) {
				json_decref(c);
				json_decref(o);
				return NULL;
			}
			if (json_object_set_new(o, k, c) < 0) {
				json_decref(o);
				return NULL;
			}
		}
		return o;
	}
	case JSON_ARRAY: {
		if (depth >= MAX_JSON_DEPTH)
			return json_string("[nested too deep]");
		json_t *a = json_array();
		size_t i;
		json_t *val;
		json_array_foreach((json_t *)v, i, val)
		{
			if (!a || json_array_append_new(
				      a, mask_json_locked(s, val, max_bytes, depth + 1)) < 0) {
				json_decref(a);
				return NULL;
			}
		}
		return a;
	}
	default:
		return json_copy((json_t *)v);
	}
}

json_t *cae_secrets_mask_json(const cae_secrets *s, const json_t *value, size_t max_bytes)
{
	lock(s);
	json_t *r = mask_json_locked(s, value, max_bytes, 0);
	unlock(s);
	return r;
}
