/* Tool definitions in the three forms agents use (functions, OpenAI, MCP), made from the
 * tool table: the tools the configuration enables, of the families the caller asks for, in
 * the table's order. */
#include "base/macro.h"
#include "cae/tools.h"

#include "tools/tools-internal.h"

#include <string.h>

#include "base/banned.h"

/* The families cae_tools_definitions offers under o. */
static unsigned offered(const cae_tools_options *o)
{
	unsigned f = CAE_TOOL_COMMAND_EXECUTOR | CAE_TOOL_EXEC;
	f |= o->split_editor ? CAE_TOOL_EDITOR_SPLIT : CAE_TOOL_EDITOR;
	if (o->patch_tool)
		f |= CAE_TOOL_PATCH;
	if (o->environment_tools)
		f |= CAE_TOOL_ENVIRONMENT;
	if (o->process_tools)
		f |= CAE_TOOL_PROCESS;
	return f;
}

/* The enabled tools of the given families, in the functions form; with_output_schema: in the
 * MCP form. New reference. */
static json_t *tools_of(const cae_config *cfg, unsigned families, bool mcp, bool output_schema)
{
	json_t *a = json_array();
	for (size_t i = 0; i < cae__tool_table_size; i++) {
		const cae_tool_def *t = &cae__tool_table[i];
		if (!(t->family & families) || !t->enabled(cfg))
			continue;
		json_t *f = t->definition();
		if (mcp && f) {
			json_t *m = json_pack("{s:O, s:O, s:O}", "name", json_object_get(f, "name"),
					      "description", json_object_get(f, "description"),
					      "inputSchema", json_object_get(f, "parameters"));
			if (m && output_schema && t->output_schema)
				json_object_set_new(m, "outputSchema", t->output_schema());
			json_decref(f);
			f = m;
		}
		json_array_append_new(a, f);
	}
	return a;
}

json_t *cae_tools_text_editor_functions(const cae_config *cfg, bool split)
{
	return tools_of(cfg, split ? CAE_TOOL_EDITOR_SPLIT : CAE_TOOL_EDITOR, false, false);
}

json_t *cae_tools_command_executor_functions(const cae_config *cfg)
{
	return tools_of(cfg, CAE_TOOL_COMMAND_EXECUTOR, false, false);
}

json_t *cae_tools_to_openai(json_t *functions)
{
	json_t *a = json_array();
	size_t i;
	json_t *f;
	json_array_foreach(functions, i, f)
	{
		json_array_append_new(a,
				      json_pack("{s:s, s:O}", "type", "function", "function", f));
	}
	return a;
}

json_t *cae_tools_definitions(const cae_config *cfg, const cae_tools_options *o)
{
	switch (o->format) {
	case CAE_TOOLS_OPENAI: {
		json_t *f = tools_of(cfg, offered(o), false, false);
		json_t *out = cae_tools_to_openai(f);
		json_decref(f);
		return out;
	}
	case CAE_TOOLS_MCP:
		return tools_of(cfg, offered(o), true, o->output_schema);
	default:
		return tools_of(cfg, offered(o), false, false);
	}
}

/* The tools of the GitHub and GitLab MCP servers that read or write a repository's files, as
 * those servers name them (unprefixed): the official GitHub MCP server (github-mcp-server)
 * and the reference servers `@modelcontextprotocol/server-github` and `server-gitlab` (all
 * three: create_or_update_file, get_file_contents, push_files), plus the GitHub server's
 * delete_file, get_file_blame, get_repository_tree and compare_file_contents, and GitLab's
 * get_repository_tree. With the text editor on, the editor is the one way to files.
 * tests/mcp/platform-tools.mjs checks this table against the servers' own tools/list. */
static const char *const platform_file_tools[] = {
    "compare_file_contents", "create_or_update_file", "delete_file", "get_file_blame",
    "get_file_contents",     "get_repository_tree",   "push_files",
};

/* A client names an MCP server's tool with the server's name in front: github_x, github-x,
 * github__x, mcp__github__x (Claude Code), github.x, github/x. Every tool of such a name is a
 * GitHub or GitLab server's: all of them go (with the text editor on, those servers are not offered
 * at all). */
static bool platform_prefixed(const char *name)
{
	if (strncmp(name, "mcp__", 5) == 0)
		name += 5;
	if (strncmp(name, "github", 6) != 0 && strncmp(name, "gitlab", 6) != 0)
		return false;
	char c = name[6];
	return c == '_' || c == '-' || c == '.' || c == '/';
}

bool cae_tools_is_platform_file_tool(const char *name)
{
	if (!name)
		return false;
	if (platform_prefixed(name))
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(platform_file_tools); i++)
		if (strcmp(name, platform_file_tools[i]) == 0)
			return true;
	return false;
}

static const char *tool_name(json_t *t)
{
	const char *n = json_string_value(json_object_get(t, "name"));
	if (!n)
		n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
	return n;
}

json_t *cae_tools_filter_platform_tools(const cae_config *cfg, json_t *tools)
{
	json_t *a = json_array();
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t)
	{
		if (cae__tool_editor_enabled(cfg) && cae_tools_is_platform_file_tool(tool_name(t)))
			continue;
		json_array_append(a, t);
	}
	return a;
}
