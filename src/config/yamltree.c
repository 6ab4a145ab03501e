#include "config/yamltree.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/macro.h"
#include "base/banned.h"

struct anchor {
	char *name;
	size_t node;
};

struct builder {
	cfg_ydoc *doc;
	size_t *stack; /* open collections */
	size_t depth;
	int max_depth;
	struct anchor anchors[CFG_YAML_MAX_ANCHORS];
	size_t n_anchors;
	int *line;
	char *msg;
	size_t msg_size;
};

static int fail(struct builder *b, int line, const char *fmt, ...) _printf_(3, 4);
static int fail(struct builder *b, int line, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b->msg, b->msg_size, fmt, ap);
	va_end(ap);
	*b->line = line;
	return -EINVAL;
}

static int new_node(struct builder *b, cfg_ynode_type type, int line, size_t *idx)
{
	cfg_ydoc *d = b->doc;
	if (d->n >= CFG_YAML_MAX_NODES)
		return fail(b, line, "too many YAML nodes (more than %d)", CFG_YAML_MAX_NODES);
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		cfg_ynode *p = realloc(d->nodes, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		d->nodes = p;
		d->cap = cap;
	}
	cfg_ynode *n = &d->nodes[d->n];
	memset(n, 0, sizeof(*n));
	n->type = type;
	n->line = line;
	*idx = d->n++;
	return 0;
}

static int add_child(struct builder *b, size_t child)
{
	cfg_ydoc *d = b->doc;
	if (b->depth == 0) {
		if (d->has_root)
			return -EINVAL; /* cannot happen: libyaml gives one root per document */
		d->has_root = true;
		d->root = child;
		return 0;
	}
	cfg_ynode *parent = &d->nodes[b->stack[b->depth - 1]];
	if (parent->n == parent->cap) {
		size_t cap = parent->cap ? parent->cap * 2 : 8;
		size_t *p = realloc(parent->items, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		parent->items = p;
		parent->cap = cap;
	}
	parent->items[parent->n++] = child;
	return 0;
}

static int add_anchor(struct builder *b, const yaml_char_t *name, size_t node, int line)
{
	if (!name)
		return 0;
	for (size_t i = 0; i < b->n_anchors; i++)
		if (strcmp(b->anchors[i].name, (const char *)name) == 0) {
			b->anchors[i].node =
			    node; /* a redefined anchor: later aliases see the new one */
			return 0;
		}
	if (b->n_anchors >= CFG_YAML_MAX_ANCHORS)
		return fail(b, line, "too many YAML anchors (more than %d)", CFG_YAML_MAX_ANCHORS);
	char *copy = strdup((const char *)name);
	if (!copy)
		return -ENOMEM;
	b->anchors[b->n_anchors].name = copy;
	b->anchors[b->n_anchors].node = node;
	b->n_anchors++;
	return 0;
}

static int on_event(struct builder *b, const yaml_event_t *ev, int *docs, bool *done)
{
	int line = (int)MIN(ev->start_mark.line, (size_t)INT32_MAX - 1) + 1;
	size_t idx;
	int r;

	switch (ev->type) {
	case YAML_STREAM_START_EVENT:
	case YAML_DOCUMENT_END_EVENT:
	case YAML_NO_EVENT:
		return 0;
	case YAML_STREAM_END_EVENT:
		*done = true;
		return 0;
	case YAML_DOCUMENT_START_EVENT:
		if (++*docs > 1)
			return fail(b, line, "more than one YAML document");
		return 0;
	case YAML_SCALAR_EVENT: {
		r = new_node(b, CFG_YSCALAR, line, &idx);
		if (r < 0)
			return r;
		cfg_ynode *n = &b->doc->nodes[idx];
		size_t len = ev->data.scalar.length;
		n->value = malloc(len + 1);
		if (!n->value)
			return -ENOMEM;
		memcpy(n->value, ev->data.scalar.value, len);
		n->value[len] = '\0';
		n->len = len;
		n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
		r = add_anchor(b, ev->data.scalar.anchor, idx, line);
		if (r < 0)
			return r;
		return add_child(b, idx);
	}
	case YAML_SEQUENCE_START_EVENT:
	case YAML_MAPPING_START_EVENT: {
		if (b->depth >= (size_t)b->max_depth)
			return fail(b, line, "nested deeper than %d levels", b->max_depth);
		bool seq = ev->type == YAML_SEQUENCE_START_EVENT;
		r = new_node(b, seq ? CFG_YSEQ : CFG_YMAP, line, &idx);
		if (r < 0)
			return r;
		r = add_anchor(b,
			       seq ? ev->data.sequence_start.anchor : ev->data.mapping_start.anchor,
			       idx, line);
		if (r < 0)
			return r;
		r = add_child(b, idx);
		if (r < 0)
			return r;
		b->stack[b->depth++] = idx;
		return 0;
	}
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		if (b->depth == 0)
			return fail(b, line, "unbalanced YAML collection");
		b->depth--;
		return 0;
	case YAML_ALIAS_EVENT:
		for (size_t i = 0; i < b->n_anchors; i++)
			if (strcmp(b->anchors[i].name, (const char *)ev->data.alias.anchor) == 0)
				return add_child(b, b->anchors[i].node);
		return fail(b, line, "unknown YAML alias \"*%.64s\"",
			    (const char *)ev->data.alias.anchor);
	}
	return 0;
}

int cae__cfg_yaml_parse(const char *text, size_t len, int max_depth, cfg_ydoc *doc, int *line,
			char *msg, size_t msg_size)
{
	memset(doc, 0, sizeof(*doc));
	*line = 0;
	if (msg_size)
		msg[0] = '\0';
	if (max_depth < 1)
		max_depth = 1;

	struct builder b = {
	    .doc = doc,
	    .max_depth = max_depth,
	    .line = line,
	    .msg = msg,
	    .msg_size = msg_size,
	};
	b.stack = calloc((size_t)max_depth, sizeof(*b.stack));
	if (!b.stack)
		return -ENOMEM;

	yaml_parser_t parser;
	if (!yaml_parser_initialize(&parser)) {
		free(b.stack);
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);

	int r = 0;
	int docs = 0;
	bool done = false;
	while (!done) {
		yaml_event_t ev;
		if (!yaml_parser_parse(&parser, &ev)) {
			if (parser.error == YAML_MEMORY_ERROR) {
				r = -ENOMEM;
			} else {
				int l =
				    (int)MIN(parser.problem_mark.line, (size_t)INT32_MAX - 1) + 1;
				if (parser.context)
					r = fail(&b, l, "invalid YAML: %s %s (column %zu)",
						 parser.problem ? parser.problem : "syntax error",
						 parser.context, parser.problem_mark.column + 1);
				else
					r = fail(&b, l, "invalid YAML: %s (column %zu)",
						 parser.problem ? parser.problem : "syntax error",
						 parser.problem_mark.column + 1);
			}
			break;
		}
		r = on_event(&b, &ev, &docs, &done);
		yaml_event_delete(&ev);
		if (r < 0)
			break;
	}
	yaml_parser_delete(&parser);
	for (size_t i = 0; i < b.n_anchors; i++)
		free(b.anchors[i].name);
	free(b.stack);
	if (r < 0)
		cae__cfg_ydoc_free(doc);
	return r;
}

void cae__cfg_ydoc_free(cfg_ydoc *doc)
{
	if (!doc)
		return;
	for (size_t i = 0; i < doc->n; i++) {
		free(doc->nodes[i].value);
		free(doc->nodes[i].items);
	}
	free(doc->nodes);
	memset(doc, 0, sizeof(*doc));
}

bool cae__cfg_ynode_is_null(const cfg_ynode *n)
{
	if (n->type != CFG_YSCALAR || !n->plain)
		return false;
	return n->len == 0 || strcmp(n->value, "~") == 0 || strcmp(n->value, "null") == 0 ||
	       strcmp(n->value, "Null") == 0 || strcmp(n->value, "NULL") == 0;
}
