"""Drop-ins for the frameworks agents are built on, one module each, imported on demand.

:mod:`blobpad.integrations.openai_agents`: the OpenAI Agents SDK (``pip install
'blobpad[openai-agents]'``). :mod:`blobpad.integrations.langgraph`: a LangGraph store,
``BlobpadStore`` (``pip install 'blobpad[langgraph]'``).  ``import blobpad`` (and this package) imports no
framework: a module here needs its framework only when it is imported itself.
"""
