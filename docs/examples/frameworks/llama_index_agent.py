"""LlamaIndex: MCP tools whose results feed a fix memory. Run: python llama_index_agent.py

Needs the ``llamaindex`` extra. The second run reuses the fix the first learned: one call.
"""

import anyio
from _acme import DRAFT, TOOL, acme_server, next_arguments
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

from invalidation_contracts.client import FixMemory
from invalidation_contracts.llama_index import contract_tools
from invalidation_contracts.mcp.serve import running_http

calls: list[dict] = []


def scripted(messages, **kwargs):
    last = messages[-1]
    if last.role == "tool" and '"success": true' in str(last.content):
        return ChatMessage(role="assistant", content="done")
    failed = last.role == "tool"
    calls.append(next_arguments(calls[-1], str(last.content)) if failed else dict(DRAFT))
    call = ToolCallBlock(tool_call_id=f"c{len(calls)}", tool_name=TOOL, tool_kwargs=calls[-1])
    return ChatMessage(role="assistant", blocks=[call])


llm = MockFunctionCallingLLM(response_generator=scripted)


async def main() -> None:
    async with running_http(acme_server()) as url:
        memory = FixMemory("row")
        async with contract_tools(url, memory) as tools:
            agent = FunctionAgent(tools=tools, llm=llm)
            for run in (1, 2):
                calls.clear()
                await agent.run(user_msg="Subscribe cus_northwind")
                print(f"run {run}: {len(calls)} model call(s)")


if __name__ == "__main__":
    anyio.run(main)
