"""Google ADK: a toolset built from a contract session. Run: python adk_agent.py

Needs the ``adk`` extra. The second run reuses the fix the first learned: one call.
"""

import anyio
from _acme import DRAFT, TOOL, acme_server, next_arguments
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

from invalidation_contracts.adk import contract_toolset
from invalidation_contracts.client import FixMemory
from invalidation_contracts.mcp.serve import running_http

calls: list[dict] = []


class Scripted(BaseLlm):
    model: str = "scripted"

    async def generate_content_async(self, llm_request, stream=False):
        answered = [p.function_response for p in llm_request.contents[-1].parts or ()]
        response = answered[-1].response if answered and answered[-1] else None
        if response is not None and not response.get("isError"):
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="done")]))
            return
        shown = response["content"][0]["text"] if response else ""
        calls.append(next_arguments(calls[-1], shown) if response else dict(DRAFT))
        call = types.FunctionCall(id=f"c{len(calls)}", name=TOOL, args=calls[-1])
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(function_call=call)])
        )


async def main() -> None:
    async with running_http(acme_server()) as url:
        memory = FixMemory("row")
        async with contract_toolset(url, memory) as toolset:
            agent = LlmAgent(name="billing", model=Scripted(), tools=[toolset])
            runner = InMemoryRunner(agent=agent, app_name="billing")
            for run in (1, 2):
                calls.clear()
                session = await runner.session_service.create_session(
                    app_name="billing", user_id="u"
                )
                ask = types.Content(role="user", parts=[types.Part(text="Subscribe cus_northwind")])
                async for _ in runner.run_async(
                    user_id="u", session_id=session.id, new_message=ask
                ):
                    pass
                print(f"run {run}: {len(calls)} model call(s)")
            await runner.close()


if __name__ == "__main__":
    anyio.run(main)
