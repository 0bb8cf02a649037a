"""One line for a store written to an agent SDK's own protocol, one module per protocol.

- :mod:`storetest.bindings.openai_agents`: an OpenAI Agents ``Session`` (``item_sessions``);
- :mod:`storetest.bindings.langchain`: a LangChain chat history (``chat_histories``);
- :mod:`storetest.bindings.adk`: a Google ADK session service (``adk_sessions``);
- :mod:`storetest.bindings.langgraph`: a LangGraph checkpointer (``checkpointers``).
- :mod:`storetest.bindings.agent_framework`: a Microsoft Agent Framework ``HistoryProvider``
  (``history_providers``), and :mod:`storetest.bindings.agent_framework_sessions` its
  whole-session ``SessionStore`` (``session_stores``).
- :mod:`storetest.bindings.llama_index`: a LlamaIndex chat store (``llama_index_chat_stores``,
  ``llama_index_db_chat_stores``).

Each turns an outer factory into store handles the clauses drive, and imports its SDK
only when the values need it. The functions are re-exported from :mod:`storetest`.
"""
