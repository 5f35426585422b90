"""LangChain / LangGraph: tools built from a contract session. Run: python langgraph_agent.py

Needs the ``langchain`` extra. The second run reuses the fix the first learned: one call.
"""

import anyio
from _acme import DRAFT, TOOL, acme_server, next_arguments
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.prebuilt import create_react_agent

from invalidation_contracts.client import FixMemory
from invalidation_contracts.langchain import contract_tools
from invalidation_contracts.mcp.serve import running_http

calls: list[dict] = []


class Scripted(GenericFakeChatModel):
    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, *args, **kwargs):
        last = messages[-1]
        if isinstance(last, ToolMessage) and last.status != "error":
            message = AIMessage(content="done")
        else:
            failed = isinstance(last, ToolMessage)
            calls.append(next_arguments(calls[-1], str(last.content)) if failed else dict(DRAFT))
            call = {"name": TOOL, "args": calls[-1], "id": f"c{len(calls)}", "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


async def main() -> None:
    async with running_http(acme_server()) as url:
        memory = FixMemory("row")
        async with contract_tools(url, memory) as tools:
            agent = create_react_agent(Scripted(messages=iter(())), tools)
            for run in (1, 2):
                calls.clear()
                await agent.ainvoke({"messages": [("user", "Subscribe cus_northwind")]})
                print(f"run {run}: {len(calls)} model call(s)")


if __name__ == "__main__":
    anyio.run(main)
