/* Tool definitions in the three forms agents use. The exec_command strings are fixed by
 * seed 001 §4.4 and must stay byte-identical. */
#include "cae/tools.h"

#include <string.h>

#include "base/banned.h"

static json_t *fn(const char *name, const char *description, json_t *parameters)
{
	return json_pack("{s:s, s:s, s:o}", "name", name, "description", description, "parameters",
			 parameters);
}

static json_t *execute_command_def(void)
{
	return fn("command-executor_execute_command",
		  "Execute a shell command (run with `sh -c`) in the task's isolated execution "
		  "environment, where the project is cloned at /workspace/project and its "
		  "dependencies are installed. Use it to run tests, builds, linters, grep/find and "
		  "git. Returns exit_code, stdout, stderr and duration_ms; each output stream is "
		  "limited in size (stdout_truncated / stderr_truncated tell when it was cut).",
		  json_pack("{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s, s:i}}, s:[s]}",
			    "type", "object", "properties", "command", "type", "string",
			    "description",
			    "The command to execute, e.g. `pytest -q` or `grep -rn \"foo\" src/`.",
			    "working_directory", "type", "string", "description",
			    "Working directory (default: /workspace/project). Relative paths are "
			    "resolved against it.",
			    "timeout_seconds", "type", "integer", "description",
			    "Timeout in seconds (default: the configured timeout, 1800).",
			    "minimum", 1, "required", "command"));
}

static json_t *exec_command_def(void)
{
	/* seed 001 §4.4, verbatim. */
	return fn(
	    "exec_command",
	    "Runs a command once in the workspace and returns stdout, stderr, and exit code.",
	    json_pack(
		"{s:s, s:{s:{s:s, s:s}, s:{s:s, s:{s:s}, s:s}, s:{s:s, s:[s, s], s:s, "
		"s:s}, s:{s:s, s:s}, s:{s:s, s:i, s:s}, s:{s:s, s:i, s:s}}, s:[s, s]}",
		"type", "object", "properties", "cwd", "type", "string", "description",
		"Working directory path in workspace.", "command", "type", "array", "items", "type",
		"string", "description",
		"Only the target command tokens to run (e.g. bun run dev).", "shell_mode", "type",
		"string", "enum", "default", "direct", "default", "default", "description",
		"Use default to apply OS shell wrapper automatically (default: default).", "stdin",
		"type", "string", "description", "UTF-8 stdin text.", "timeout_ms", "type",
		"number", "default", 30000, "description",
		"Execution timeout in milliseconds (default: 30000).", "max_output_chars", "type",
		"number", "default", 200000, "description",
		"Per-stream output char limit (default: 200000).", "required", "cwd", "command"));
}

static const char editor_description[] =
    "View, create and edit files in the task's workspace.\n"
    "* `view` shows a file with line numbers (like `cat -n`) or lists a directory two levels "
    "deep; `view_range` [start, end] limits a file view (end -1 = to the end of the file).\n"
    "* `create` writes a new file and fails if the path exists.\n"
    "* `str_replace` replaces `old_str`, which must occur exactly once in the file (include "
    "enough context to make it unique; whitespace matters), with `new_str`.\n"
    "* `insert` inserts `new_str` after line `insert_line` (0 = at the top).\n"
    "* `undo_edit` reverts the last edit of the file.\n"
    "Paths are relative to /workspace/project or absolute inside it.";

static json_t *editor_property(const char *which)
{
	if (strcmp(which, "command") == 0)
		return json_pack(
		    "{s:s, s:[s, s, s, s, s], s:s}", "type", "string", "enum", "view", "create",
		    "str_replace", "insert", "undo_edit", "description",
		    "The command to run: view, create, str_replace, insert or undo_edit.");
	if (strcmp(which, "path") == 0)
		return json_pack(
		    "{s:s, s:s}", "type", "string", "description",
		    "Path of the file or directory, e.g. /workspace/project/src/main.py "
		    "or src/main.py.");
	if (strcmp(which, "file_text") == 0)
		return json_pack("{s:s, s:s}", "type", "string", "description",
				 "create: the content of the new file.");
	if (strcmp(which, "old_str") == 0)
		return json_pack("{s:s, s:s}", "type", "string", "description",
				 "str_replace: the exact text to replace (must occur once).");
	if (strcmp(which, "new_str") == 0)
		return json_pack("{s:s, s:s}", "type", "string", "description",
				 "str_replace: the replacement text (empty to delete); insert: the "
				 "text to insert.");
	if (strcmp(which, "insert_line") == 0)
		return json_pack("{s:s, s:i, s:s}", "type", "integer", "minimum", 0, "description",
				 "insert: the line after which new_str is inserted (0 = top).");
	/* view_range */
	return json_pack("{s:s, s:{s:s}, s:i, s:i, s:s}", "type", "array", "items", "type",
			 "integer", "minItems", 2, "maxItems", 2, "description",
			 "view: [start, end] line range, 1-based, end -1 = end of file.");
}

static json_t *editor_single_def(void)
{
	json_t *props = json_object();
	const char *names[] = {"command", "path",	 "file_text", "old_str",
			       "new_str", "insert_line", "view_range"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		json_object_set_new(props, names[i], editor_property(names[i]));
	return fn("text_editor", editor_description,
		  json_pack("{s:s, s:o, s:[s, s]}", "type", "object", "properties", props,
			    "required", "command", "path"));
}

static json_t *editor_split_def(const char *cmd, const char *desc, const char *const *props,
				const char *const *required)
{
	json_t *p = json_object(), *req = json_array();
	for (const char *const *x = props; *x; x++)
		json_object_set_new(p, *x, editor_property(*x));
	for (const char *const *x = required; *x; x++)
		json_array_append_new(req, json_string(*x));
	char name[64];
	snprintf(name, sizeof(name), "text_editor_%s", cmd);
	return fn(name, desc,
		  json_pack("{s:s, s:o, s:o}", "type", "object", "properties", p, "required", req));
}

json_t *cae_tools_text_editor_functions(const cae_config *cfg, bool split)
{
	json_t *a = json_array();
	if (!cfg->text_editor_mcp.enabled)
		return a;
	if (!split) {
		json_array_append_new(a, editor_single_def());
		return a;
	}
	static const char *const view_p[] = {"path", "view_range", NULL};
	static const char *const path_r[] = {"path", NULL};
	static const char *const create_p[] = {"path", "file_text", NULL};
	static const char *const replace_p[] = {"path", "old_str", "new_str", NULL};
	static const char *const replace_r[] = {"path", "old_str", NULL};
	static const char *const insert_p[] = {"path", "insert_line", "new_str", NULL};
	json_array_append_new(a,
			      editor_split_def("view",
					       "Show a file with line numbers (like `cat -n`) or "
					       "list a directory two levels deep.",
					       view_p, path_r));
	json_array_append_new(a,
			      editor_split_def("create",
					       "Create a new file with the given content; fails if "
					       "the path exists.",
					       create_p, create_p));
	json_array_append_new(a,
			      editor_split_def("str_replace",
					       "Replace old_str, which must occur exactly once in "
					       "the file, with new_str.",
					       replace_p, replace_r));
	json_array_append_new(
	    a, editor_split_def("insert", "Insert new_str after line insert_line (0 = top).",
				insert_p, insert_p));
	json_array_append_new(
	    a, editor_split_def("undo_edit", "Revert the last edit of the file.", path_r, path_r));
	return a;
}

json_t *cae_tools_command_executor_functions(const cae_config *cfg)
{
	json_t *a = json_array();
	if (cfg->command_executor.enabled)
		json_array_append_new(a, execute_command_def());
	return a;
}

static json_t *apply_patch_def(void)
{
	return fn(
	    "apply_patch",
	    "Apply a patch to the workspace. Accepts a JSON array of commands "
	    "({type: file_edit|shell_command|git_operation, action, target, content}), "
	    "Markdown with fenced blocks (```lang:path for a file's new content, ```bash for "
	    "a command, ```git for git add/commit), the `*** Begin Patch` format, or a unified "
	    "diff. Paths are relative to the workspace. The diff forms apply all or nothing; "
	    "the other forms run command by command and go on after a failure unless "
	    "stop_on_error. Returns what each command did (✓/✗ per command).",
	    json_pack(
		"{s:s, s:{s:{s:s, s:[{s:s}, {s:s, s:{s:s}}]}, s:{s:s, s:s}, s:{s:s, s:s}, "
		"s:{s:s, s:s}, s:{s:s, s:s}}, s:[s]}",
		"type", "object", "properties", "patch", "description",
		"The patch text (or the commands as a JSON array).", "anyOf", "type", "string",
		"type", "array", "items", "type", "object", "dry_run", "type", "boolean",
		"description", "Only check the patch and show the plan; change nothing.",
		"stop_on_error", "type", "boolean", "description",
		"Stop at the first failing command.", "rollback", "type", "boolean", "description",
		"On a failure, restore the workspace exactly as it was before the patch.",
		"auto_commit", "type", "boolean", "description",
		"Commit every change afterwards (git add -A; git commit).", "required", "patch"));
}

static json_t *environment_defs(void)
{
	json_t *a = json_array();
	json_array_append_new(a, fn("environment_list",
				    "List the execution environments and which one is current.",
				    json_pack("{s:s, s:{}}", "type", "object", "properties")));
	json_array_append_new(
	    a, fn("environment_prepare",
		  "Prepare an isolated execution environment for a task: clone the repository "
		  "(a URL or a local path), install its dependencies, and make it the current "
		  "environment for the other tools. Returns its ContainerInfo.",
		  json_pack("{s:s, s:{s:{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s, s:[s, s]}, s:{s:s}, "
			    "s:{s:s}}, s:[s, s]}, s:{s:s, s:s}}, s:[s]}",
			    "type", "object", "properties", "task", "type", "object", "properties",
			    "uuid", "type", "string", "repo", "type", "string", "kind", "type",
			    "string", "enum", "issue", "pull_request", "branch", "type", "string",
			    "target_branch", "type", "string", "required", "uuid", "repo",
			    "environment", "type", "string", "description",
			    "Environment name (python, node, java, go, miniforge); default python.",
			    "required", "task")));
	json_array_append_new(a, fn("environment_cleanup",
				    "Remove an execution environment (default: the current one).",
				    json_pack("{s:s, s:{s:{s:s}}}", "type", "object", "properties",
					      "task_uuid", "type", "string")));
	return a;
}

static json_t *exec_command_output_schema(void)
{
	return json_pack("{s:s, s:{s:{s:s}, s:{s:s, s:{s:s}}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, "
			 "s:{s:s}, s:{s:s}, s:{s:s}}, s:[s, s, s, s, s, s, s, s, s]}",
			 "type", "object", "properties", "cwd", "type", "string", "command", "type",
			 "array", "items", "type", "string", "exit_code", "type", "integer",
			 "stdout", "type", "string", "stderr", "type", "string", "stdout_truncated",
			 "type", "boolean", "stderr_truncated", "type", "boolean", "timed_out",
			 "type", "boolean", "duration_ms", "type", "integer", "required", "cwd",
			 "command", "exit_code", "stdout", "stderr", "stdout_truncated",
			 "stderr_truncated", "timed_out", "duration_ms");
}

static json_t *execute_command_output_schema(void)
{
	return json_pack("{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}}, "
			 "s:[s, s, s, s]}",
			 "type", "object", "properties", "exit_code", "type", "integer", "stdout",
			 "type", "string", "stderr", "type", "string", "duration_ms", "type",
			 "integer", "stdout_truncated", "type", "boolean", "stderr_truncated",
			 "type", "boolean", "timed_out", "type", "boolean", "required", "exit_code",
			 "stdout", "stderr", "duration_ms");
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

static json_t *to_mcp(json_t *functions, bool output_schema)
{
	json_t *a = json_array();
	size_t i;
	json_t *f;
	json_array_foreach(functions, i, f)
	{
		const char *name = json_string_value(json_object_get(f, "name"));
		json_t *t = json_pack("{s:s, s:O, s:O}", "name", name, "description",
				      json_object_get(f, "description"), "inputSchema",
				      json_object_get(f, "parameters"));
		if (output_schema && strcmp(name, "exec_command") == 0)
			json_object_set_new(t, "outputSchema", exec_command_output_schema());
		if (output_schema && strcmp(name, "command-executor_execute_command") == 0)
			json_object_set_new(t, "outputSchema", execute_command_output_schema());
		json_array_append_new(a, t);
	}
	return a;
}

json_t *cae_tools_definitions(const cae_config *cfg, const cae_tools_options *o)
{
	json_t *f = cae_tools_command_executor_functions(cfg);
	if (cfg->command_executor.enabled)
		json_array_append_new(f, exec_command_def());
	json_t *ed = cae_tools_text_editor_functions(cfg, o->split_editor);
	json_array_extend(f, ed);
	json_decref(ed);
	if (o->patch_tool && cfg->worker.enabled)
		json_array_append_new(f, apply_patch_def());
	if (o->environment_tools) {
		json_t *e = environment_defs();
		json_array_extend(f, e);
		json_decref(e);
	}
	json_t *out;
	switch (o->format) {
	case CAE_TOOLS_OPENAI:
		out = cae_tools_to_openai(f);
		break;
	case CAE_TOOLS_MCP:
		out = to_mcp(f, o->output_schema);
		break;
	default:
		return f;
	}
	json_decref(f);
	return out;
}

bool cae_tools_is_platform_file_tool(const char *name)
{
	return name && (strncmp(name, "github_", 7) == 0 || strncmp(name, "gitlab_", 7) == 0 ||
			strncmp(name, "github-", 7) == 0 || strncmp(name, "gitlab-", 7) == 0);
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
		if (cfg->text_editor_mcp.enabled && cae_tools_is_platform_file_tool(tool_name(t)))
			continue;
		json_array_append(a, t);
	}
	return a;
}
