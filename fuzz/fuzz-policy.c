/* Fuzz target: arbitrary bytes as a command line for the command policy (and as an argv, and
 * as allow-list entries). Must never crash, leak or hang, and every verdict must be
 * well-formed: NUL-terminated valid UTF-8 without control characters, a reason exactly when
 * denied. A line starting with a denied command is denied whatever follows it. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "cae/policy.h"
#include "policy/shlex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const char *s, size_t max)
{
	size_t n = strnlen(s, max);
	if (n == max || !cae__utf8_is_valid(s, n))
		abort();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			abort();
}

static void check_verdict(const cae_policy_verdict *v)
{
	check_text(v->program, sizeof(v->program));
	check_text(v->command, sizeof(v->command));
	check_text(v->reason, sizeof(v->reason));
	if (v->allowed != (v->rule == CAE_POLICY_RULE_NONE))
		abort();
	if (v->allowed != (v->reason[0] == '\0'))
		abort();
	char *err = cae_policy_verdict_stderr(v);
	if (!err)
		abort();
	free(err);
}

static int on_word_check(const cae_sh_command *cmd, void *userdata)
{
	size_t *count = userdata;
	if (cmd->n_words == 0)
		abort();
	for (size_t i = 0; i < cmd->n_words; i++) {
		const cae_sh_word *w = &cmd->words[i];
		if (!w->text || w->text[w->len] != '\0' || w->assign_len > w->len)
			abort();
	}
	(*count)++;
	return 0;
}

static cae_policy *policy(bool enforce)
{
	static cae_policy *p[2];
	if (!p[enforce]) {
		cae_policy_options o;
		cae_policy_options_init(&o);
		o.enforce = enforce;
		p[enforce] = cae_policy_new(&o, NULL);
		if (!p[enforce])
			abort();
	}
	return p[enforce];
}

/* Up to 8 lines of the input as additional (first half) and exclude (second half) entries. */
static void fuzz_lists(const char *s, size_t size)
{
	const char *items[8];
	char *copies[8];
	size_t n = 0;
	for (const char *q = s; n < 8 && q < s + size;) {
		const char *nl = memchr(q, '\n', (size_t)(s + size - q));
		size_t l = nl ? (size_t)(nl - q) : (size_t)(s + size - q);
		copies[n] = strndup(q, l);
		if (!copies[n])
			abort();
		items[n] = copies[n];
		n++;
		q += l + 1;
	}
	cae_policy_options o;
	cae_policy_options_init(&o);
	o.use_default = (size % 8) == 0; /* building the default list is the slow part */
	o.custom_list = (cae_policy_list){items, n / 2};
	o.additional = (cae_policy_list){items, n / 2};
	o.exclude = (cae_policy_list){items + n / 2, n - n / 2};
	o.enforce = true;
	cae_error err = {0};
	cae_policy *p = cae_policy_new(&o, &err);
	if (p) {
		char *text = cae_policy_allowed_text(p);
		json_t *j = cae_policy_allowed_json(p);
		char *dump = j ? json_dumps(j, JSON_COMPACT) : NULL;
		if (!text || !cae__utf8_is_valid(text, strlen(text)) || !dump)
			abort();
		free(dump);
		json_decref(j);
		free(text);
		cae_policy_verdict v;
		cae_policy_check_n(p, s, size, &v);
		check_verdict(&v);
		cae_policy_free(p);
	} else if (err.code == 0) {
		abort();
	}
	for (size_t i = 0; i < n; i++)
		free(copies[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > (1u << 20))
		return 0;
	char *s = malloc(size + 16);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	cae_policy_verdict v;

	/* the NUL-terminated copy, and the raw bytes with their NULs */
	for (int e = 0; e < 2; e++) {
		if (cae_policy_check(policy(e), s, &v) != 0)
			abort();
		check_verdict(&v);
		if (cae_policy_check_n(policy(e), s, size, &v) != 0)
			abort();
		check_verdict(&v);
	}

	/* the lexer alone */
	size_t count = 0;
	cae_error err = {0};
	int r = cae__sh_lex(s, size, 0, 32, on_word_check, &count, &err);
	if (r > 0 || (r < 0 && r != -EINVAL && r != -ELOOP && r != -ENOMEM))
		abort();

	/* a denied command in front: denied, whatever follows */
	char *pre = malloc(size + 9);
	if (pre) {
		memcpy(pre, "sudo x;", 7);
		memcpy(pre + 7, data, size);
		cae_policy_check_n(policy(0), pre, size + 7, &v);
		check_verdict(&v);
		if (v.allowed)
			abort();
		free(pre);
	}

	/* the bytes split at NULs as an argv */
	size_t argc = 1;
	for (size_t i = 0; i < size; i++)
		argc += data[i] == '\0';
	const char **argv = calloc(argc + 1, sizeof(*argv));
	if (argv) {
		size_t k = 0;
		for (const char *q = s; k < argc; q += strlen(q) + 1)
			argv[k++] = q;
		for (int e = 0; e < 2; e++) {
			cae_policy_check_argv(policy(e), argv, &v);
			check_verdict(&v);
		}
		free(argv);
	}

	if (size < 4096)
		fuzz_lists(s, size);
	free(s);
	return 0;
}
