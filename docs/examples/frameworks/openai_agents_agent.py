"""OpenAI Agents SDK: an MCP server class taking ``memory=``. Run: python openai_agents_agent.py

Needs the ``openai-agents`` extra. The second run reuses the fix the first learned: one call.
"""

import json

import anyio
from _acme import DRAFT, TOOL, acme_server, next_arguments
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from invalidation_contracts.client import FixMemory
from invalidation_contracts.mcp.serve import running_http
from invalidation_contracts.openai_agents import ContractMCPServerStreamableHttp

calls: list[dict] = []


class Scripted(Model):
    async def get_response(self, system_instructions, input, *args, **kwargs):
        outputs = [
            i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        shown = "".join(p.get("text", "") for p in outputs[-1]["output"]) if outputs else ""
        if '"success": true' in shown:
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            done = ResponseOutputMessage(
                id="m", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[done], usage=Usage(), response_id=None)
        calls.append(next_arguments(calls[-1], shown) if outputs else dict(DRAFT))
        call = ResponseFunctionToolCall(
            type="function_call",
            call_id=f"c{len(calls)}",
            name=TOOL,
            arguments=json.dumps(calls[-1]),
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


async def main() -> None:
    set_tracing_disabled(True)
    async with running_http(acme_server()) as url:
        memory = FixMemory("row")
        async with ContractMCPServerStreamableHttp({"url": url}, memory=memory) as server:
            agent = Agent(name="billing", model=Scripted(), mcp_servers=[server])
            for run in (1, 2):
                calls.clear()
                await Runner.run(agent, "Subscribe cus_northwind to plan_partner_growth")
                print(f"run {run}: {len(calls)} model call(s)")


if __name__ == "__main__":
    anyio.run(main)
