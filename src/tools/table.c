/* The tool table, and what reads it by name: dispatch of a call, the quick check, the
 * session's MCP listing. A tool is added here, with its functions in its family's file. */
#include "tools/tools-internal.h"

#include "base/macro.h"
#include "cae/tools.h"

#include <errno.h>
#include <string.h>

#include "base/banned.h"

const cae_tool_def cae__tool_table[] = {
    {
	.name = "command-executor_execute_command",
	.family = CAE_TOOL_COMMAND_EXECUTOR,
	.enabled = cae__tool_command_executor_enabled,
	.definition = cae__tool_execute_command_definition,
	.output_schema = cae__tool_execute_command_output_schema,
	.call = cae__tool_call_execute_command,
    },
    {
	.name = "exec_command",
	.family = CAE_TOOL_EXEC,
	.enabled = cae__tool_command_executor_enabled,
	.definition = cae__tool_exec_command_definition,
	.output_schema = cae__tool_exec_command_output_schema,
	.call = cae__tool_call_exec_command,
    },
    {
	.name = "text_editor",
	.family = CAE_TOOL_EDITOR,
	.enabled = cae__tool_editor_enabled,
	.definition = cae__tool_editor_definition,
	.call = cae__tool_call_editor,
	.quick = cae__tool_editor_quick,
    },
    {
	.name = "text_editor_view",
	.family = CAE_TOOL_EDITOR_SPLIT,
	.enabled = cae__tool_editor_enabled,
	.definition = cae__tool_editor_view_definition,
	.call = cae__tool_call_editor_view,
	.quick = cae__tool_editor_view_quick,
    },
    {
	.name = "text_editor_create",
	.family = CAE_TOOL_EDITOR_SPLIT,
	.enabled = cae__tool_editor_enabled,
	.definition = cae__tool_editor_create_definition,
	.call = cae__tool_call_editor_create,
    },
    {
	.name = "text_editor_str_replace",
	.family = CAE_TOOL_EDITOR_SPLIT,
	.enabled = cae__tool_editor_enabled,
	.definition = cae__tool_editor_str_replace_definition,
	.call = cae__tool_call_editor_str_replace,
    },
    {
	.name = "text_editor_insert",
	.family = CAE_TOOL_EDITOR_SPLIT,
	.enabled = cae__tool_editor_enabled,
	.definition = cae__tool_editor_insert_definition,
	.call = cae__tool_call_editor_insert,
    },
    {
	.name = "text_editor_undo_edit",
	.family = CAE_TOOL_EDITOR_SPLIT,
	.enabled = cae__tool_editor_enabled,
	.definition = cae__tool_editor_undo_edit_definition,
	.call = cae__tool_call_editor_undo_edit,
    },
    {
	.name = "apply_patch",
	.family = CAE_TOOL_PATCH,
	.enabled = cae__tool_patch_enabled,
	.definition = cae__tool_apply_patch_definition,
	.call = cae__tool_call_apply_patch,
    },
    {
	.name = "environment_list",
	.family = CAE_TOOL_ENVIRONMENT,
	.enabled = cae__tool_environment_enabled,
	.definition = cae__tool_environment_list_definition,
	.call = cae__tool_call_environment_list,
    },
    {
	.name = "environment_prepare",
	.family = CAE_TOOL_ENVIRONMENT,
	.enabled = cae__tool_environment_enabled,
	.definition = cae__tool_environment_prepare_definition,
	.call = cae__tool_call_environment_prepare,
    },
    {
	.name = "environment_cleanup",
	.family = CAE_TOOL_ENVIRONMENT,
	.enabled = cae__tool_environment_enabled,
	.definition = cae__tool_environment_cleanup_definition,
	.call = cae__tool_call_environment_cleanup,
    },
    {
	.name = "environment_port_forward",
	.family = CAE_TOOL_ENVIRONMENT,
	.enabled = cae__tool_environment_enabled,
	.definition = cae__tool_environment_port_forward_definition,
	.call = cae__tool_call_environment_port_forward,
    },
    {
	.name = "environment_snapshot",
	.family = CAE_TOOL_ENVIRONMENT,
	.enabled = cae__tool_environment_enabled,
	.definition = cae__tool_environment_snapshot_definition,
	.call = cae__tool_call_environment_snapshot,
    },
    {
	.name = "environment_restore",
	.family = CAE_TOOL_ENVIRONMENT,
	.enabled = cae__tool_environment_enabled,
	.definition = cae__tool_environment_restore_definition,
	.call = cae__tool_call_environment_restore,
    },
    {
	.name = "environment_fork",
	.family = CAE_TOOL_ENVIRONMENT,
	.enabled = cae__tool_environment_enabled,
	.definition = cae__tool_environment_fork_definition,
	.call = cae__tool_call_environment_fork,
    },
    {
	.name = "process_start",
	.family = CAE_TOOL_PROCESS,
	.enabled = cae__tool_process_enabled,
	.definition = cae__tool_process_start_definition,
	.call = cae__tool_call_process_start,
    },
    {
	.name = "process_read",
	.family = CAE_TOOL_PROCESS,
	.enabled = cae__tool_process_enabled,
	.definition = cae__tool_process_read_definition,
	.call = cae__tool_call_process_read,
	.quick = cae__tool_process_read_quick,
    },
    {
	.name = "process_write",
	.family = CAE_TOOL_PROCESS,
	.enabled = cae__tool_process_enabled,
	.definition = cae__tool_process_write_definition,
	.call = cae__tool_call_process_write,
	.quick = cae__tool_process_quick,
    },
    {
	.name = "process_wait",
	.family = CAE_TOOL_PROCESS,
	.enabled = cae__tool_process_enabled,
	.definition = cae__tool_process_wait_definition,
	.call = cae__tool_call_process_wait,
    },
    {
	.name = "process_kill",
	.family = CAE_TOOL_PROCESS,
	.enabled = cae__tool_process_enabled,
	.definition = cae__tool_process_kill_definition,
	.call = cae__tool_call_process_kill,
    },
    {
	.name = "process_list",
	.family = CAE_TOOL_PROCESS,
	.enabled = cae__tool_process_enabled,
	.definition = cae__tool_process_list_definition,
	.call = cae__tool_call_process_list,
	.quick = cae__tool_process_quick,
    },
};

const size_t cae__tool_table_size = ARRAY_SIZE(cae__tool_table);

const cae_tool_def *cae__tool_lookup(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < cae__tool_table_size; i++)
		if (strcmp(cae__tool_table[i].name, name) == 0)
			return &cae__tool_table[i];
	return NULL;
}

json_t *cae_session_tool_list(cae_session *s, bool with_output_schema)
{
	cae_tools_options o = {
	    .format = CAE_TOOLS_MCP,
	    .environment_tools = true,
	    .output_schema = with_output_schema,
	    .patch_tool = true,
	    .process_tools = true,
	};
	return cae_tools_definitions(cae_session_config(s), &o);
}

bool cae_session_call_is_quick(const cae_session *s, const char *name, const json_t *args)
{
	const cae_tool_def *t = cae__tool_lookup(name);
	const cae_config *cfg = cae_session_config(s);
	/* a view by an MCP editor server waits for another process: never on the reader */
	if (t && (t->family & (CAE_TOOL_EDITOR | CAE_TOOL_EDITOR_SPLIT)) &&
	    cfg->text_editor_mcp.mode == CAE_CONFIG_EDITOR_MCP)
		return false;
	return t && t->quick && t->enabled(cfg) && t->quick(args);
}

/* Every tool's result goes through the same masking, whatever the tool did itself: a
 * configured secret or a URL's credentials in a command's output, a file the text editor shows
 * or a snippet of its edit, a patch's report, an error message. */
static int mask_result(const cae_secrets *secrets, cae_tool_result *res, cae_error *err)
{
	if (res->text) {
		char *t = cae_secrets_mask(secrets, res->text);
		if (!t)
			return cae_error_set(err, -ENOMEM, "out of memory");
		free(res->text);
		res->text = t;
	}
	if (res->structured) {
		json_t *m = cae_secrets_mask_json(secrets, res->structured, 0);
		if (!m)
			return cae_error_set(err, -ENOMEM, "out of memory");
		json_decref(res->structured);
		res->structured = m;
	}
	return 0;
}

int cae_session_call_tool(cae_session *s, const char *name, json_t *args, const cae_call_ctx *ctx,
			  cae_tool_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	if (!name)
		return cae_error_set(err, -ENOENT, "no tool name");
	if (args && !json_is_object(args))
		return cae_error_set(err, -EINVAL, "tool arguments must be an object");
	const cae_tool_def *t = cae__tool_lookup(name);
	if (!t)
		return cae_error_set(err, -ENOENT, "unknown tool: %s", name);
	if (!t->enabled(cae_session_config(s)))
		return cae_error_set(err, -ENOENT, "unknown tool: %s (disabled)", name);
	_cleanup_(json_decrefp) json_t *empty = NULL;
	if (!args && !(args = empty = json_object()))
		return cae_error_set(err, -ENOMEM, "out of memory");
	cae_tool_env env;
	if (cae__session_snapshot(s, ctx, &env) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = t->call(&env, args, res, err);
	if (r >= 0)
		r = mask_result(env.secrets, res, err);
	cae__tool_env_clear(&env);
	if (r < 0)
		cae_tool_result_clear(res);
	return r;
}
