"""bunko for agent frameworks: an MCP server (``mcp_server``), a Google ADK memory service (``adk``) and a
LangChain vector store (``langchain``). Each needs its optional extra (``mcp``, ``adk``, ``langchain``) and is
imported only on use."""
