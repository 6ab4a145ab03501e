/* The value syntax shared by the file, the environment and cae_config_set() (booleans,
 * integers, sizes, decimals), and the messages about a bad value: what the key expects,
 * where the value came from, the value itself (bounded, escaped, hidden for secrets). */
#include "config/config-internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/banned.h"

static bool ieq(const char *a, const char *b)
{
	return strcasecmp(a, b) == 0;
}

int cae_config_parse_bool(const char *s, bool *out)
{
	if (!s)
		return -EINVAL;
	if (ieq(s, "true") || ieq(s, "yes") || ieq(s, "on") || strcmp(s, "1") == 0) {
		*out = true;
		return 0;
	}
	if (ieq(s, "false") || ieq(s, "no") || ieq(s, "off") || strcmp(s, "0") == 0) {
		*out = false;
		return 0;
	}
	return -EINVAL;
}

int cae__cfg_parse_ll(const char *s, long long *out)
{
	const char *p = s;
	bool neg = false;
	if (*p == '+' || *p == '-')
		neg = *p++ == '-';
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	unsigned long long v = 0;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (9223372036854775807ull - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	if (*p)
		return -EINVAL;
	*out = neg ? -(long long)v : (long long)v;
	return 0;
}

/* "123", "1.5": integer part and up to 9 fraction digits (as a numerator over 1e9). */
static int parse_decimal(const char **pp, unsigned long long *ip, unsigned long long *frac)
{
	const char *p = *pp;
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	unsigned long long v = 0;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	unsigned long long f = 0, scale = 1000000000ull;
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		bool first_dropped = true;
		for (; isdigit((unsigned char)*p); p++) {
			if (scale > 1) {
				scale /= 10;
				f += (unsigned long long)(*p - '0') * scale;
			} else if (first_dropped) {
				/* round at the 10th digit, so that "0.12345678899999999" (a double
				 * printed back with 17 digits) reads as 0.123456789 */
				first_dropped = false;
				if (*p >= '5')
					f++;
			}
		}
		if (f >= 1000000000ull) {
			if (v == UINT64_MAX)
				return -ERANGE;
			v++;
			f -= 1000000000ull;
		}
	}
	*pp = p;
	*ip = v;
	*frac = f;
	return 0;
}

int cae_config_parse_size(const char *s, uint64_t *out)
{
	if (!s)
		return -EINVAL;
	const char *p = s;
	unsigned long long ip, frac;
	int r = parse_decimal(&p, &ip, &frac);
	if (r < 0)
		return -EINVAL;
	while (*p == ' ')
		p++;
	unsigned long long mult = 1;
	switch (tolower((unsigned char)*p)) {
	case 'k':
		mult = 1024ull;
		break;
	case 'm':
		mult = MiB;
		break;
	case 'g':
		mult = GiB;
		break;
	case 't':
		mult = TiB;
		break;
	default:
		break;
	}
	if (mult > 1) {
		p++;
		if (tolower((unsigned char)*p) == 'i')
			p++;
	}
	if (tolower((unsigned char)*p) == 'b')
		p++;
	if (*p)
		return -EINVAL;
	if (ip > UINT64_MAX / mult)
		return -EINVAL;
	unsigned long long v = ip * mult;
	/* the fraction: frac / 1e9 of one unit (exact for the usual halves and quarters) */
	unsigned long long add = (unsigned long long)((double)frac / 1e9 * (double)mult);
	if (v > UINT64_MAX - add)
		return -EINVAL;
	*out = v + add;
	return 0;
}

int cae__cfg_parse_positive_double(const char *s, double *out)
{
	const char *p = s;
	unsigned long long ip, frac;
	if (parse_decimal(&p, &ip, &frac) < 0 || *p)
		return -EINVAL;
	*out = (double)ip + (double)frac / 1e9;
	return 0;
}

const char *cae__cfg_trim(char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	size_t n = strlen(s);
	while (n > 0 &&
	       (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

void cae__cfg_show_value(char *buf, size_t size, const char *s, size_t len)
{
	size_t o = 0;
	if (size < 8) {
		if (size)
			buf[0] = '\0';
		return;
	}
	buf[o++] = '"';
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (o + 8 >= size || i >= 64) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (ch == '"' || ch == '\\') {
			buf[o++] = '\\';
			buf[o++] = (char)ch;
		} else if (ch < 0x20 || ch == 0x7f) {
			o += (size_t)snprintf(buf + o, size - o, "\\x%02x", ch);
		} else {
			buf[o++] = (char)ch;
		}
	}
	buf[o++] = '"';
	buf[o] = '\0';
}

const char *cae__cfg_expected(const struct cfg_key *k, char *buf, size_t size)
{
	switch (k->type) {
	case V_BOOL:
		return "expected a boolean (true/false, yes/no, on/off, 1/0)";
	case V_INT:
		if (k->max >= 86400 && k->min == 1)
			return "expected a positive integer";
		snprintf(buf, size, "expected an integer from %lld to %lld", k->min, k->max);
		return buf;
	case V_SIZE:
	case V_MEMSIZE:
		return "expected a size such as 4g, 512m or a number of bytes";
	case V_DOUBLE:
		return "expected a positive number";
	case V_STRING:
		return "expected a string";
	case V_ENUM: {
		size_t o = (size_t)snprintf(buf, size, "expected one of");
		for (size_t i = 0; k->names[i] && o < size; i++)
			o += (size_t)snprintf(buf + o, size - o, "%s%s", i ? ", " : " ",
					      k->names[i]);
		return buf;
	}
	case V_STRLIST:
		return "expected a list of strings";
	case V_ENVMAP:
		return "expected a mapping of environment name to image";
	case V_SECTION:
		return "expected a mapping";
	}
	return "bad value";
}

int cae__cfg_key_error(struct cfg_ctx *c, const struct cfg_where *w, int idx, const char *fmt, ...)
{
	char msg[CAE_ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	const char *path = idx >= 0 ? cfg_keys[idx].path : "config";
	if (w && w->env)
		return cae_error_set(c->err, -EINVAL, "environment variable %s (%s): %s", w->env,
				     path, msg);
	if (w && w->file && w->line > 0)
		return cae_error_set(c->err, -EINVAL, "%s:%d: %s: %s", w->file, w->line, path, msg);
	return cae_error_set(c->err, -EINVAL, "%s: %s", path, msg);
}

int cae__cfg_bad_value(struct cfg_ctx *c, const struct cfg_where *w, int idx, const char *got,
		       size_t len)
{
	char ebuf[256], vbuf[128];
	const char *exp = cae__cfg_expected(&cfg_keys[idx], ebuf, sizeof(ebuf));
	if (cfg_keys[idx].flags & F_SECRET)
		return cae__cfg_key_error(c, w, idx, "%s", exp);
	cae__cfg_show_value(vbuf, sizeof(vbuf), got, len);
	return cae__cfg_key_error(c, w, idx, "%s, got %s", exp, vbuf);
}

int cae__cfg_add_warning(cae_config *cfg, const char *fmt, ...)
{
	cae_config_strlist *l = &cfg->warnings;
	if (l->n > CFG_MAX_WARNINGS)
		return 0;
	char line[512];
	if (l->n == CFG_MAX_WARNINGS) {
		snprintf(line, sizeof(line), "more warnings omitted");
	} else {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(line, sizeof(line), fmt, ap);
		va_end(ap);
	}
	char **items = realloc(l->items, (l->n + 1) * sizeof(*items));
	if (!items)
		return -ENOMEM;
	l->items = items;
	l->items[l->n] = strdup(line);
	if (!l->items[l->n])
		return -ENOMEM;
	l->n++;
	return 0;
}
