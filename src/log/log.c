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
#include "base/banned.h"

struct cae_log {
	int fd;
	atomic_int min_level;
	pthread_mutex_t lock; /* guards the write */
	cae_secrets *secrets; /* masked in every line */
};

static const char *const level_names[] = {"debug", "info", "warn", "error"};

cae_log *cae_log_new(int fd, cae_log_level min_level)
{
	cae_log *log = calloc(1, sizeof(*log));
	if (!log)
		return NULL;
	log->fd = fd;
	atomic_init(&log->min_level, (int)min_level);
	log->secrets = cae_secrets_new();
	if (!log->secrets) {
		free(log);
		return NULL;
	}
	if (pthread_mutex_init(&log->lock, NULL) != 0) {
		cae_secrets_free(log->secrets);
		free(log);
		return NULL;
	}
	return log;
}

void cae_log_free(cae_log *log)
{
	if (!log)
		return;
	cae_secrets_free(log->secrets);
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

cae_secrets *cae_log_secrets(cae_log *log)
{
	return log ? log->secrets : NULL;
}

int cae_log_add_secret(cae_log *log, const char *secret)
{
	return cae_secrets_add(cae_log_secrets(log), secret);
}

char *cae_redactn(const cae_log *log, const char *text, size_t len, size_t *out_len)
{
	return cae_secrets_maskn(log ? log->secrets : NULL, text, len, out_len);
}

char *cae_redact(const cae_log *log, const char *text)
{
	return cae_secrets_mask(log ? log->secrets : NULL, text);
}

char *cae_redact_url(const char *text)
{
	return cae_secrets_mask(NULL, text);
}

json_t *cae_redact_json(const cae_log *log, const json_t *value)
{
	return cae_secrets_mask_json(log ? log->secrets : NULL, value, CAE_LOG_MAX_STRING);
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
	cae__iso8601_now(ts, sizeof(ts));
	cae_buf msg;
	cae__buf_init(&msg, CAE_LOG_MAX_STRING + 1);
	/* a log message is cut at the cap, and empty when memory runs out: the line is still
	 * written with its event and fields */
	if (fmt)
		DISCARD_RESULT(cae__buf_vprintf(&msg, fmt, ap));

	/* The line is built and masked outside the lock: only the write is serialised. */
	json_t *line = json_object();
	if (line) {
		json_object_set_new(line, "ts", json_string(ts));
		json_object_set_new(line, "level", json_string(cae_log_level_name(level)));
		json_object_set_new(line, "event",
				    cae_secrets_json_string(log->secrets, event ? event : "",
							    event ? strlen(event) : 0,
							    CAE_LOG_MAX_STRING));
		if (fmt)
			json_object_set_new(line, "msg",
					    cae_secrets_json_string(log->secrets,
								    msg.data ? msg.data : "",
								    msg.len, CAE_LOG_MAX_STRING));
		_cleanup_(json_decrefp) json_t *masked =
		    json_is_object(fields)
			? cae_secrets_mask_json(log->secrets, fields, CAE_LOG_MAX_STRING)
			: NULL;
		const char *key;
		json_t *val;
		json_object_foreach(masked, key, val)
		{
			if (!reserved(key))
				json_object_set(line, key, val);
		}
		char *s = json_dumps(line, JSON_COMPACT);
		if (s) {
			size_t n = strlen(s);
			char *withnl = realloc(s, n + 2);
			if (withnl) {
				withnl[n] = '\n';
				withnl[n + 1] = '\0';
				pthread_mutex_lock(&log->lock);
				(void)cae__write_all(log->fd, withnl, n + 1);
				pthread_mutex_unlock(&log->lock);
				s = withnl;
			}
			free(s);
		}
		json_decref(line);
	}
	cae__buf_clear(&msg);
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
