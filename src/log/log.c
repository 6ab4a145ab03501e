#include "cae/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "base/utf8.h"
#include "base/banned.h"

#define MAX_JSON_DEPTH 32
#define MAX_SECRETS 256

struct secret {
	char *s;
	size_t len;
};

struct cae_log {
	int fd;
	atomic_int min_level;
	pthread_mutex_t lock;	/* guards secrets and the write */
	struct secret *secrets; /* longest first */
	size_t n_secrets;
};

static const char *const level_names[] = {"debug", "info", "warn", "error"};

cae_log *cae_log_new(int fd, cae_log_level min_level)
{
	cae_log *log = calloc(1, sizeof(*log));
	if (!log)
		return NULL;
	log->fd = fd;
	atomic_init(&log->min_level, (int)min_level);
	if (pthread_mutex_init(&log->lock, NULL) != 0) {
		free(log);
		return NULL;
	}
	return log;
}

void cae_log_free(cae_log *log)
{
	if (!log)
		return;
	for (size_t i = 0; i < log->n_secrets; i++) {
		explicit_bzero(log->secrets[i].s, log->secrets[i].len);
		free(log->secrets[i].s);
	}
	free(log->secrets);
	pthread_mutex_destroy(&log->lock);
	free(log);
}

void cae_log_set_level(cae_log *log, cae_log_level min_level)
{
	if (log)
		atomic_store(&log->min_level, (int)min_level);
}

bool cae_log_enabled(const cae_log *log, cae_log_level level)
{
	if (!log)
		return false;
	return (int)level >= atomic_load(&((cae_log *)log)->min_level);
}

int cae_log_level_parse(const char *s, cae_log_level *out)
{
	if (!s)
		return -EINVAL;
	for (size_t i = 0; i < ARRAY_SIZE(level_names); i++)
		if (strcasecmp(s, level_names[i]) == 0) {
			*out = (cae_log_level)i;
			return 0;
		}
	if (strcasecmp(s, "warning") == 0) {
		*out = CAE_LOG_WARN;
		return 0;
	}
	return -EINVAL;
}

const char *cae_log_level_name(cae_log_level level)
{
	return (unsigned)level < ARRAY_SIZE(level_names) ? level_names[level] : "unknown";
}

int cae_log_add_secret(cae_log *log, const char *secret)
{
	if (!log || !secret || !*secret)
		return 0;
	size_t len = strlen(secret);
	if (len < CAE_LOG_MIN_SECRET)
		return -EINVAL;
	int r = 0;
	pthread_mutex_lock(&log->lock);
	for (size_t i = 0; i < log->n_secrets; i++)
		if (log->secrets[i].len == len && memcmp(log->secrets[i].s, secret, len) == 0)
			goto out;
	if (log->n_secrets >= MAX_SECRETS) {
		r = -ENOSPC;
		goto out;
	}
	struct secret *a = realloc(log->secrets, (log->n_secrets + 1) * sizeof(*a));
	if (!a) {
		r = -ENOMEM;
		goto out;
	}
	log->secrets = a;
	char *copy = strdup(secret);
	if (!copy) {
		r = -ENOMEM;
		goto out;
	}
	/* keep longest first, so that a secret containing another is replaced whole */
	size_t pos = 0;
	while (pos < log->n_secrets && log->secrets[pos].len >= len)
		pos++;
	memmove(&a[pos + 1], &a[pos], (log->n_secrets - pos) * sizeof(*a));
	a[pos].s = copy;
	a[pos].len = len;
	log->n_secrets++;
out:
	pthread_mutex_unlock(&log->lock);
	return r;
}

/* ---- redaction ------------------------------------------------------------------------ */

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
static int redact_urls(cae_buf *out, const char *text, size_t len)
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
		if ((r = cae_buf_append(out, text + last, auth - last)) < 0 ||
		    (r = cae_buf_append(out, "***", 3)) < 0)
			return r;
		last = at; /* the '@' and what follows are kept */
		i = at + 1;
	}
	return cae_buf_append(out, text + last, len - last);
}

/* The secrets pass; the caller holds log->lock (or log is NULL). Takes *data (malloc'd). */
static int redact_secrets_locked(const cae_log *log, char **data, size_t *len)
{
	if (!log)
		return 0;
	for (size_t k = 0; k < log->n_secrets; k++) {
		const struct secret *s = &log->secrets[k];
		const char *p = *data, *end = *data + *len;
		const char *hit = memmem(p, *len, s->s, s->len);
		if (!hit)
			continue;
		cae_buf b;
		cae_buf_init(&b, SIZE_MAX);
		int r = 0;
		while (hit && r >= 0) {
			r = cae_buf_append(&b, p, (size_t)(hit - p));
			if (r >= 0)
				r = cae_buf_append(&b, "***", 3);
			p = hit + s->len;
			hit = memmem(p, (size_t)(end - p), s->s, s->len);
		}
		if (r >= 0)
			r = cae_buf_append(&b, p, (size_t)(end - p));
		if (r < 0) {
			cae_buf_clear(&b);
			return r;
		}
		size_t n;
		char *nd = cae_buf_steal(&b, &n);
		if (!nd)
			return -ENOMEM;
		free(*data);
		*data = nd;
		*len = n;
	}
	return 0;
}

static char *redact_locked(const cae_log *log, const char *text, size_t len, size_t *out_len)
{
	cae_buf b;
	cae_buf_init(&b, SIZE_MAX);
	if (redact_urls(&b, text, len) < 0) {
		cae_buf_clear(&b);
		return NULL;
	}
	size_t n;
	char *data = cae_buf_steal(&b, &n);
	if (!data)
		return NULL;
	if (redact_secrets_locked(log, &data, &n) < 0) {
		free(data);
		return NULL;
	}
	if (out_len)
		*out_len = n;
	return data;
}

char *cae_redactn(const cae_log *log, const char *text, size_t len, size_t *out_len)
{
	if (!text)
		return NULL;
	if (!log)
		return redact_locked(NULL, text, len, out_len);
	cae_log *l = (cae_log *)log; /* the mutex is not part of the logical state */
	pthread_mutex_lock(&l->lock);
	char *r = redact_locked(log, text, len, out_len);
	pthread_mutex_unlock(&l->lock);
	return r;
}

char *cae_redact(const cae_log *log, const char *text)
{
	return text ? cae_redactn(log, text, strlen(text), NULL) : NULL;
}

char *cae_redact_url(const char *text)
{
	return cae_redact(NULL, text);
}

/* A JSON string: redacted, capped at CAE_LOG_MAX_STRING bytes (marked), valid UTF-8. */
static json_t *clean_string_locked(const cae_log *log, const char *s, size_t len)
{
	size_t n;
	_cleanup_free_ char *red = redact_locked(log, s, len, &n);
	if (!red)
		return NULL;
	static const char mark[] = "...[truncated]";
	if (n > CAE_LOG_MAX_STRING) {
		n = cae_utf8_floor(red, CAE_LOG_MAX_STRING - (sizeof(mark) - 1));
		memcpy(red + n, mark, sizeof(mark));
		n += sizeof(mark) - 1;
	}
	if (cae_utf8_is_valid(red, n))
		return json_stringn(red, n);
	size_t m;
	_cleanup_free_ char *clean = cae_utf8_sanitize(red, n, &m);
	return clean ? json_stringn(clean, m) : NULL;
}

static json_t *redact_json_locked(const cae_log *log, const json_t *v, int depth)
{
	if (!v)
		return json_null();
	switch (json_typeof(v)) {
	case JSON_STRING:
		return clean_string_locked(log, json_string_value(v), json_string_length(v));
	case JSON_OBJECT: {
		if (depth >= MAX_JSON_DEPTH)
			return json_string("[nested too deep]");
		json_t *o = json_object();
		const char *key;
		json_t *val;
		json_object_foreach((json_t *)v, key, val)
		{
			size_t kn;
			_cleanup_free_ char *k = redact_locked(log, key, strlen(key), &kn);
			json_t *c = redact_json_locked(log, val, depth + 1);
			if (!o || !k || !c || json_object_set_new(o, k, c) < 0) {
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
			if (!a ||
			    json_array_append_new(a, redact_json_locked(log, val, depth + 1)) < 0) {
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

json_t *cae_redact_json(const cae_log *log, const json_t *value)
{
	if (!log)
		return redact_json_locked(NULL, value, 0);
	cae_log *l = (cae_log *)log;
	pthread_mutex_lock(&l->lock);
	json_t *r = redact_json_locked(log, value, 0);
	pthread_mutex_unlock(&l->lock);
	return r;
}

/* ---- events --------------------------------------------------------------------------- */

static bool reserved(const char *key)
{
	return strcmp(key, "ts") == 0 || strcmp(key, "level") == 0 || strcmp(key, "event") == 0 ||
	       strcmp(key, "msg") == 0;
}

/* Builds and writes one line. fields is borrowed. */
static void emit(cae_log *log, cae_log_level level, const char *event, json_t *fields,
		 const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));
static void emit(cae_log *log, cae_log_level level, const char *event, json_t *fields,
		 const char *fmt, va_list ap)
{
	char ts[40];
	cae_iso8601_now(ts, sizeof(ts));
	cae_buf msg;
	cae_buf_init(&msg, CAE_LOG_MAX_STRING + 1);
	if (fmt)
		(void)cae_buf_vprintf(&msg, fmt, ap);

	pthread_mutex_lock(&log->lock);
	json_t *line = json_object();
	if (line) {
		json_object_set_new(line, "ts", json_string(ts));
		json_object_set_new(line, "level", json_string(cae_log_level_name(level)));
		json_object_set_new(
		    line, "event",
		    clean_string_locked(log, event ? event : "", event ? strlen(event) : 0));
		if (fmt)
			json_object_set_new(
			    line, "msg",
			    clean_string_locked(log, msg.data ? msg.data : "", msg.len));
		if (json_is_object(fields)) {
			const char *key;
			json_t *val;
			json_object_foreach(fields, key, val)
			{
				if (reserved(key))
					continue;
				_cleanup_free_ char *k = redact_locked(log, key, strlen(key), NULL);
				json_t *c = redact_json_locked(log, val, 1);
				if (k && c)
					json_object_set_new(line, k, c);
				else
					json_decref(c);
			}
		}
		char *s = json_dumps(line, JSON_COMPACT);
		if (s) {
			size_t n = strlen(s);
			char *withnl = realloc(s, n + 2);
			if (withnl) {
				withnl[n] = '\n';
				withnl[n + 1] = '\0';
				(void)cae_write_all(log->fd, withnl, n + 1);
				s = withnl;
			}
			free(s);
		}
		json_decref(line);
	}
	pthread_mutex_unlock(&log->lock);
	cae_buf_clear(&msg);
}

void cae_log_eventv(cae_log *log, cae_log_level level, const char *event, const char *fmt,
		    va_list ap)
{
	if (!cae_log_enabled(log, level))
		return;
	emit(log, level, event, NULL, fmt, ap);
}

void cae_log_event(cae_log *log, cae_log_level level, const char *event, const char *fmt, ...)
{
	if (!cae_log_enabled(log, level))
		return;
	va_list ap;
	va_start(ap, fmt);
	emit(log, level, event, NULL, fmt, ap);
	va_end(ap);
}

void cae_log_fields(cae_log *log, cae_log_level level, const char *event, json_t *fields,
		    const char *fmt, ...)
{
	if (cae_log_enabled(log, level)) {
		va_list ap;
		va_start(ap, fmt);
		emit(log, level, event, fields, fmt, ap);
		va_end(ap);
	}
	json_decref(fields);
}
