"""PydanticAI: a toolset whose tool results feed a fix memory. Run: python pydantic_ai_agent.py

Needs the ``pydantic-ai`` extra. The second run reuses the fix the first learned: one call.
"""

import anyio
from _acme import DRAFT, TOOL, acme_server, next_arguments
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

from invalidation_contracts.client import FixMemory
from invalidation_contracts.mcp.serve import running_http
from invalidation_contracts.pydantic_ai import ContractToolset

calls: list[dict] = []


def scripted(messages, info):
    last = messages[-1].parts[-1]
    if isinstance(last, ToolReturnPart) and last.outcome == "success":
        return ModelResponse(parts=[TextPart("done")])
    if isinstance(last, ToolReturnPart):  # a retry: the model view of the rejection
        calls.append(next_arguments(calls[-1], last.model_response_str()))
    else:
        calls.append(dict(DRAFT))
    return ModelResponse(parts=[ToolCallPart(TOOL, calls[-1])])


async def main() -> None:
    async with running_http(acme_server()) as url:
        memory = FixMemory("row")
        toolset = ContractToolset(url, memory)
        agent = Agent(FunctionModel(scripted), toolsets=[toolset])
        async with toolset:
            for run in (1, 2):
                calls.clear()
                await agent.run("Subscribe cus_northwind to plan_partner_growth")
                print(f"run {run}: {len(calls)} model call(s)")


if __name__ == "__main__":
    anyio.run(main)
